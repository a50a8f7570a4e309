"""Round trips and throughput of the Redis backend, next to a raw redis-py baseline.

Starts a ``redis-server`` of its own on a free loopback port (``--url`` uses another one).

* Round trips are counted by the server: ``INFO commandstats`` before and after N calls
  (the ``INFO`` itself excluded), for ``add_turn`` and ``get_llm_context`` on a
  ``truncation`` memory and for ``add_turn`` on a ``rolling_summary`` memory whose
  summarizer answers at once (its lease and outcome writes included).
* Throughput: 1, 16 and 64 sessions, one task each, alternating ``add_turn`` and
  ``get_llm_context``, in ``--rounds`` rounds of ``--seconds`` per contender, interleaved
  (a noisy neighbour then slows every contender alike); the baseline does one
  ``EVALSHA`` of a trivial script (for ``add_turn``) and one ``GET`` (for
  ``get_llm_context``) per operation on the same connection pool. The ratio is backend
  ops/s over baseline ops/s in the same round; the median over the rounds is reported
  with its range.
* Side by side, when ``openai-agents`` is installed: its ``RedisSession`` on the same pool
  storing the same turns (``add_items`` of a user and an assistant item) and reading the
  last five of them (``get_items(limit=10)``).

Usage::

    python tests/bench/bench_redis.py [--seconds 1] [--rounds 5] [--sessions 1,16,64] [--url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from redis.asyncio import Redis
from stm_redis import RedisShortTermMemory
from stm_redis.server import RedisServer

from reference_impl import ConversationTurn, MemoryBudget, MemoryKey, ShortTermMemoryConfig


async def commands(client: Redis) -> int:
    """Commands clients sent: scripts only (the backend sends nothing else for these
    operations); commands a script runs inside the server are not round trips."""
    stats = await client.info("commandstats")
    names = ("evalsha", "eval", "script")
    return sum(
        int(v["calls"])
        for k, v in stats.items()
        if k.removeprefix("cmdstat_").split("|")[0] in names
    )


def truncation() -> ShortTermMemoryConfig:
    return ShortTermMemoryConfig(strategy="truncation", budget=MemoryBudget(full_zone_turns=5))


async def summarize(payload: Any) -> dict[str, str]:
    return {"summary": f"{len(payload['turns'])} more turns"}


def memory(client: Redis, config: ShortTermMemoryConfig, session: str) -> RedisShortTermMemory:
    return RedisShortTermMemory(
        client,
        config=config,
        key=MemoryKey("bench", "user", session),
        summarizer=summarize,
        namespace=f"bench-{uuid.uuid4().hex[:6]}",
    )


def turn(i: int) -> ConversationTurn:
    return ConversationTurn(f"question {i} " + "x" * 80, f"answer {i} " + "y" * 120)


async def round_trips(client: Redis, n: int = 200) -> None:
    m = memory(client, truncation(), "rt")
    await m.add_turn(turn(-1))
    before = await commands(client)
    for i in range(n):
        await m.add_turn(turn(i))
    per_add = (await commands(client) - before) / n
    before = await commands(client)
    for _ in range(n):
        await m.get_llm_context()
    per_read = (await commands(client) - before) / n
    rolling = ShortTermMemoryConfig(
        strategy="rolling_summary", budget=MemoryBudget(full_zone_turns=5)
    )
    r = memory(client, rolling, "rt-summary")
    before = await commands(client)
    for i in range(n):
        await r.add_turn(turn(i))
        await asyncio.sleep(0)
    await r.flush()
    per_summarized = (await commands(client) - before) / n
    await m.aclose()
    await r.aclose()
    print("round trips (scripts the server ran, per call)")
    print(f"  add_turn, truncation:                 {per_add:.2f}")
    print(f"  get_llm_context:                      {per_read:.2f}")
    print("  add_turn, rolling_summary, with its")
    print(f"    share of the summarizer's traffic:  {per_summarized:.2f}")


async def run_for(seconds: float, tasks: list[Any]) -> int:
    done = 0
    stop = time.monotonic() + seconds

    async def loop(op: Any) -> None:
        nonlocal done
        i = 0
        while time.monotonic() < stop:
            await op(i)
            i += 1
            done += 1

    await asyncio.gather(*(loop(op) for op in tasks))
    return done


def backend_ops(client: Redis, sessions: int) -> tuple[list[Any], list[RedisShortTermMemory]]:
    memories = [memory(client, truncation(), f"s{n}") for n in range(sessions)]

    def backend_op(m: RedisShortTermMemory) -> Any:
        async def op(i: int) -> None:
            if i % 2:
                await m.get_llm_context()
            else:
                await m.add_turn(turn(i))

        return op

    return [backend_op(m) for m in memories], memories


def baseline_ops(client: Redis, sessions: int) -> list[Any]:
    script = client.register_script("return redis.call('SET', KEYS[1], ARGV[1])")
    prefix = uuid.uuid4().hex[:6]

    def baseline_op(n: int) -> Any:
        key = f"bench-raw-{prefix}:{n}"

        async def op(i: int) -> None:
            if i % 2:
                await client.get(key)
            else:
                await script(keys=[key], args=[str(i)])

        return op

    return [baseline_op(n) for n in range(sessions)]


def agents_ops(client: Redis, sessions: int) -> list[Any] | None:
    """The OpenAI Agents SDK's ``RedisSession`` storing the same turns (a user and an
    assistant item per turn) and reading the last 5 turns (10 items), as the backend's
    ``full_zone_turns=5`` view does. ``None`` when ``openai-agents`` is not installed."""
    try:
        from agents.extensions.memory.redis_session import RedisSession
    except ImportError:
        return None
    prefix = f"bench-agents-{uuid.uuid4().hex[:6]}"
    stores = [
        RedisSession(f"s{n}", redis_client=client, key_prefix=prefix) for n in range(sessions)
    ]

    def agents_op(session: Any) -> Any:
        async def op(i: int) -> None:
            if i % 2:
                await session.get_items(limit=10)
            else:
                t = turn(i)
                await session.add_items(
                    [
                        {"role": "user", "content": t.user_message},
                        {"role": "assistant", "content": t.assistant_response},
                    ]
                )

        return op

    return [agents_op(s) for s in stores]


async def throughput(
    client: Redis, sessions: int, seconds: float, rounds: int
) -> dict[str, list[float]]:
    """Ops/s of each contender, measured in ``rounds`` interleaved rounds (the order
    rotates), so that a noisy neighbour slows every contender alike."""
    ours, memories = backend_ops(client, sessions)
    contenders = {"backend": ours, "raw": baseline_ops(client, sessions)}
    agents = agents_ops(client, sessions)
    if agents is not None:
        contenders["agents"] = agents
    names = list(contenders)
    for name in names:  # warm up: scripts loaded, connections open, first state written
        await run_for(0.2, contenders[name])
    rates: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            rates[name].append(await run_for(seconds, contenders[name]) / seconds)
    for m in memories:
        await m.aclose()
    return rates


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.0%} ({min(values):.0%}-{max(values):.0%})"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sessions", default="1,16,64")
    parser.add_argument("--url")
    args = parser.parse_args()
    server = None if args.url else RedisServer().start()
    url = args.url or server.url  # type: ignore[union-attr]
    client = Redis.from_url(url, max_connections=128)
    try:
        await round_trips(client)
        print(
            f"\nthroughput: {args.rounds} interleaved rounds of {args.seconds:g} s per"
            " contender; ops alternate add_turn and read; ratios: median (min-max) of the"
            " per-round ratios"
        )
        print(
            f"  {'sessions':>8} {'backend ops/s':>13} {'raw ops/s':>10} {'backend/raw':>16}"
            f" {'RedisSession':>13} {'backend/RedisSession':>21}"
        )
        for sessions in (int(s) for s in args.sessions.split(",")):
            rates = await throughput(client, sessions, args.seconds, args.rounds)
            ours, raw = rates["backend"], rates["raw"]
            to_raw = [a / b for a, b in zip(ours, raw, strict=True)]
            line = (
                f"  {sessions:>8} {statistics.median(ours):>13.0f}"
                f" {statistics.median(raw):>10.0f} {spread(to_raw):>16}"
            )
            if "agents" in rates:
                agents = rates["agents"]
                to_agents = [a / b for a, b in zip(ours, agents, strict=True)]
                line += (
                    f" {statistics.median(agents):>13.0f}"
                    f" {statistics.median(to_agents):>10.1f}x"
                    f" ({min(to_agents):.1f}-{max(to_agents):.1f})"
                )
            else:
                line += f" {'(not installed)':>13}"
            print(line)
    finally:
        await client.aclose()
        if server is not None:
            server.close()


if __name__ == "__main__":
    asyncio.run(main())
