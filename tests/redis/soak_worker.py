"""One OS process of the Redis soak tests (run as a script by test_redis_soak.py).

Adds turns to shared sessions through ``RedisShortTermMemory``. The summarizer appends the
ids of the turns it was sent to the previous summary, so the final summary lists every
covered turn in order: a turn summarized twice, or lost, shows in it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from stm_redis import RedisMemoryError, RedisShortTermMemory

from reference_impl import ConversationTurn, MemoryBudget, MemoryKey, ShortTermMemoryConfig


def memory_config(*, backlog: int = 1000) -> ShortTermMemoryConfig:
    return ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=3, summary_max_tokens=200_000, total_max_tokens=0),
        retry_attempts=3,
        retry_backoff_base_s=0.01,
        degraded_retry_interval_s=0.05,
        recovery_backlog_limit=backlog,
        summarizer_timeout_s=30.0,
    )


class Summarizer:
    def __init__(self, proc: int, log: Path, *, slow_s: float, fail: float, hang: bool) -> None:
        self.proc, self.log, self.slow_s, self.fail, self.hang = proc, log, slow_s, fail, hang
        self.rng = random.Random(proc)
        self.calls = 0

    async def __call__(self, payload: dict[str, Any]) -> dict[str, str]:
        self.calls += 1
        ids = [turn["user"] for turn in payload["turns"]]
        with self.log.open("a") as out:
            out.write(json.dumps({"proc": self.proc, "turns": ids}) + "\n")
        if self.hang:
            await asyncio.sleep(3600)
        await asyncio.sleep(self.slow_s)
        if self.rng.random() < self.fail:
            raise RuntimeError("scripted failure")
        previous = payload["previous_summary"]
        return {"summary": ",".join([previous, *ids]) if previous else ",".join(ids)}


async def add(memory: RedisShortTermMemory, turn: ConversationTurn, turn_id: str) -> None:
    for attempt in range(50):
        try:
            await memory.add_turn(turn, turn_id=turn_id)
            return
        except RedisMemoryError:  # typed and retryable: the turn id makes it idempotent
            await asyncio.sleep(0.01 * (attempt + 1))
    raise RuntimeError(f"turn {turn_id} could not be added")


def dump(memories: dict[int, RedisShortTermMemory]) -> None:
    """On SIGUSR1 (sent by a test about to give up on this process): print what every task
    awaits and each memory's state to stderr, so a hang shows its cause."""
    out = sys.stderr
    for task in asyncio.all_tasks():
        print(f"--- task {task.get_name()}: {task!r}", file=out)
        task.print_stack(file=out)
    for s, memory in memories.items():
        state, snap = memory.to_dict(), memory._snap
        print(
            f"--- memory s{s}: health={state['health']} pending={len(state['pending'])} "
            f"turns={len(state['turns'])} backlog={len(state['backlog'])} "
            f"rev/fence/epoch={snap and (snap.rev, snap.fence, snap.epoch)} "
            f"worker={memory._worker!r} handoff={memory._handoff is not None} "
            f"outcomes={len(memory._outcomes)} closed={memory._closed}",
            file=out,
        )
    out.flush()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--proc", type=int, required=True)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--fail", type=float, default=0.0)
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--lease", type=float, default=5.0)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    summarizer = Summarizer(args.proc, args.log, slow_s=args.slow, fail=args.fail, hang=args.hang)
    client = Redis.from_url(args.url, max_connections=64)
    memories = {
        s: RedisShortTermMemory(
            client,
            config=memory_config(),
            key=MemoryKey("soak", "user", f"s{s}"),
            summarizer=summarizer,
            namespace=args.namespace,
            lease_ttl_s=args.lease,
            poll_interval_s=0.01,
        )
        for s in range(args.sessions)
    }
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump, memories)
    order = [(s, i) for i in range(args.turns) for s in range(args.sessions)]
    for s, i in order:
        turn_id = f"p{args.proc}-{i}"
        await add(memories[s], ConversationTurn(turn_id, "ok"), turn_id)
    print("added", flush=True)
    if args.hang:
        await asyncio.sleep(3600)
    for memory in memories.values():
        await memory.flush()
    for memory in memories.values():
        await memory.aclose()
    await client.aclose()
    print(json.dumps({"calls": summarizer.calls}), flush=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
