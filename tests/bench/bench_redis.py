"""Round trips and throughput of the Redis backend, next to a raw redis-py baseline.

Starts a ``redis-server`` of its own on a free loopback port (``--url`` uses another one).

* Round trips are counted by the server: ``INFO commandstats`` before and after N calls
  (the ``INFO`` itself excluded), for ``add_turn`` and ``get_llm_context`` on a
  ``truncation`` memory and for ``add_turn`` on a ``rolling_summary`` memory whose
  summarizer answers at once (its lease and outcome writes included).
* Throughput: 1, 16 and 64 sessions, one task each, alternating ``add_turn`` and
  ``get_llm_context`` for ``--seconds``; the baseline does one ``EVALSHA`` of a trivial
  script (for ``add_turn``) and one ``GET`` (for ``get_llm_context``) per operation on the
  same connection pool. The ratio is backend ops/s over baseline ops/s.
* Side by side, when ``openai-agents`` is installed: its ``RedisSession`` on the same pool
  storing the same turns (``add_items`` of a user and an assistant item) and reading the
  last five of them (``get_items(limit=10)``).

Usage::

    python tests/bench/bench_redis.py [--seconds 3] [--sessions 1,16,64] [--url URL]
"""

from __future__ import annotations

import argparse
import asyncio
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


async def throughput(client: Redis, sessions: int, seconds: float) -> tuple[float, float]:
    memories = [memory(client, truncation(), f"s{n}") for n in range(sessions)]

    def backend_op(m: RedisShortTermMemory) -> Any:
        async def op(i: int) -> None:
            if i % 2:
                await m.get_llm_context()
            else:
                await m.add_turn(turn(i))

        return op

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

    ours = await run_for(seconds, [backend_op(m) for m in memories]) / seconds
    raw = await run_for(seconds, [baseline_op(n) for n in range(sessions)]) / seconds
    for m in memories:
        await m.aclose()
    return ours, raw


async def agents_throughput(client: Redis, sessions: int, seconds: float) -> float | None:
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

    return await run_for(seconds, [agents_op(s) for s in stores]) / seconds


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--sessions", default="1,16,64")
    parser.add_argument("--url")
    args = parser.parse_args()
    server = None if args.url else RedisServer().start()
    url = args.url or server.url  # type: ignore[union-attr]
    client = Redis.from_url(url, max_connections=128)
    try:
        await round_trips(client)
        print(f"\nthroughput, ops/s ({args.seconds:g} s each; ops alternate add_turn and read)")
        print(
            f"  {'sessions':>8} {'backend':>9} {'raw redis-py':>13} {'ratio':>6}"
            f" {'RedisSession':>13} {'backend/it':>11}"
        )
        for sessions in (int(s) for s in args.sessions.split(",")):
            ours, raw = await throughput(client, sessions, args.seconds)
            agents = await agents_throughput(client, sessions, args.seconds)
            versus = (
                f" {'(not installed)':>13}"
                if agents is None
                else f" {agents:>13.0f} {ours / agents:>10.1f}x"
            )
            print(f"  {sessions:>8} {ours:>9.0f} {raw:>13.0f} {ours / raw:>6.0%}{versus}")
    finally:
        await client.aclose()
        if server is not None:
            server.close()


if __name__ == "__main__":
    asyncio.run(main())
