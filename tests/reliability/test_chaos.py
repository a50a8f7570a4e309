"""Thousands of turns through a memory whose summarizer and callbacks misbehave at random:
every turn is accounted for and nothing is left running.

The figures of ``docs/reliability.md`` come from the constants here (``test_figures.py``
checks that they agree).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from reference_impl import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    MemoryHealth,
    ShortTermMemoryConfig,
)

pytestmark = pytest.mark.anyio

#: Turns added per run, and runs (seeds).
CHAOS_TURNS = 3_000
CHAOS_SEEDS = (1, 2)
#: What a summarizer call does, with its weight.
BEHAVIOURS = {
    "valid": 10,
    "slow-valid": 2,
    "raises": 2,
    "not-a-mapping": 1,
    "no-summary": 1,
    "not-a-string": 1,
    "oversize": 1,
    "cancelled": 1,
    "hangs": 1,
    "ignores-cancellation": 1,
}
#: What a callback does, with its weight.
CALLBACK_BEHAVIOURS = {"returns": 6, "raises": 2, "cancelled": 1, "slow": 1}
TIMEOUT_S = 0.02


class Chaos:
    """A summarizer and callbacks drawn from a seeded random source, recording what the
    memory asked of them."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.calls: Counter[str] = Counter()
        self.callbacks: Counter[str] = Counter()
        #: Summary text -> the turns its call summarized (each summary text is unique).
        self.summarized: dict[str, list[str]] = {}
        self.installed: list[str] = []
        self.count = 0

    def _pick(self, weights: Mapping[str, int]) -> str:
        return self.random.choices(list(weights), weights=list(weights.values()))[0]

    async def summarizer(self, payload: Mapping[str, Any]) -> Any:
        behaviour = self._pick(BEHAVIOURS)
        self.calls[behaviour] += 1
        self.count += 1
        summary = f"s{self.count}"
        self.summarized[summary] = [turn["user"] for turn in payload["turns"]]
        if behaviour == "slow-valid":
            await asyncio.sleep(TIMEOUT_S / 4)
        elif behaviour == "raises":
            raise RuntimeError("backend down")
        elif behaviour == "not-a-mapping":
            return [summary]
        elif behaviour == "no-summary":
            return {"text": summary}
        elif behaviour == "not-a-string":
            return {"summary": 42}
        elif behaviour == "oversize":
            return {"summary": "x" * 100_000}
        elif behaviour == "cancelled":
            raise asyncio.CancelledError
        elif behaviour == "hangs":
            await asyncio.Event().wait()
        elif behaviour == "ignores-cancellation":
            for _ in range(3):  # swallows the first cancellations, then gives up
                try:
                    await asyncio.sleep(TIMEOUT_S * 2)
                except asyncio.CancelledError:
                    continue
            return {"summary": summary}
        return {"summary": summary}

    async def _callback(self, name: str) -> None:
        behaviour = self._pick(CALLBACK_BEHAVIOURS)
        self.callbacks[f"{name}:{behaviour}"] += 1
        if behaviour == "raises":
            raise ValueError(f"{name} failed")
        if behaviour == "cancelled":
            raise asyncio.CancelledError
        if behaviour == "slow":
            await asyncio.sleep(0.001)

    async def on_turn_added(self, turn: ConversationTurn) -> None:
        await self._callback("on_turn_added")

    async def on_summary_updated(self, old: str, new: str) -> None:
        self.installed.append(new)
        await self._callback("on_summary_updated")

    async def on_health_changed(self, old: MemoryHealth, new: MemoryHealth) -> None:
        await self._callback("on_health_changed")


@pytest.mark.parametrize("seed", CHAOS_SEEDS)
async def test_every_turn_is_accounted_for_through_summarizer_and_callback_chaos(
    seed: int,
) -> None:
    chaos = Chaos(seed)
    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=5, total_max_tokens=4_000, summary_max_tokens=1_000),
        summarizer_timeout_s=TIMEOUT_S,
        retry_attempts=2,
        retry_backoff_base_s=0.001,
        degraded_retry_interval_s=0.002,
        recovery_backlog_limit=50,
        on_turn_added=chaos.on_turn_added,
        on_summary_updated=chaos.on_summary_updated,
        on_health_changed=chaos.on_health_changed,
    )
    before = asyncio.all_tasks()
    memory = DefaultShortTermMemory(config=config, summarizer=chaos.summarizer)
    users = [f"turn {i} é🐧" for i in range(CHAOS_TURNS)]
    for index, user in enumerate(users):
        await memory.add_turn(ConversationTurn(user, f"answer {index}", ts=float(index)))
        # Let the summarizer and callbacks run between turns, and now and then let time
        # pass for retries, recoveries and timeouts.
        await asyncio.sleep(0.002 if index % 10 == 0 else 0)
        if index % 250 == 0:
            memory.from_dict(memory.to_dict())  # a reload with calls in flight
    # Let whatever is pending be summarized, through more chaos, until healthy and done.
    for _ in range(200):
        await memory.flush()
        if memory.health is MemoryHealth.HEALTHY and not memory.to_dict()["pending"]:
            break
        await asyncio.sleep(0.005)
    state = memory.to_dict()
    # Callbacks are fire-and-forget and aclose() drops the undelivered ones (CON-003): on a
    # busy machine the last install's on_summary_updated can still be queued behind a slow
    # callback here. Events arrive in order and summary texts are unique, so once the last
    # install is reported, every one before it has been.
    for _ in range(5_000):
        if not state["summary"] or chaos.installed[-1:] == [state["summary"]]:
            break
        await asyncio.sleep(0.001)
    await memory.aclose()

    kept = [t["user_message"] for part in ("turns", "pending", "backlog") for t in state[part]]
    covered = {user for summary in chaos.installed for user in chaos.summarized[summary]}
    assert len(kept) == len(set(kept)), "a turn is kept twice"
    assert set(kept) <= set(users)
    # Every turn is kept, covered by a summary that was installed, or counted as dropped.
    lost = [user for user in users if user not in covered and user not in kept]
    assert len(lost) == state["dropped_turns"], (
        f"{len(lost)} turns neither kept nor summarized, {state['dropped_turns']} counted "
        f"as dropped; first: {lost[:3]}"
    )
    assert state["summary"] == (chaos.installed[-1] if chaos.installed else "")
    assert chaos.calls.keys() == BEHAVIOURS.keys(), chaos.calls  # every behaviour happened
    assert {key.split(":")[1] for key in chaos.callbacks} == CALLBACK_BEHAVIOURS.keys()
    # Nothing of the memory's is left running. A call that swallowed its cancellation was
    # abandoned at the timeout and cannot be stopped from outside: it ends by itself.
    left = asyncio.all_tasks() - before
    abandoned = {t for t in left if _awaits_the_summarizer(t)}
    assert left == abandoned, f"tasks left after aclose(): {left - abandoned}"
    if abandoned:
        await asyncio.wait(abandoned, timeout=1.0)
    assert asyncio.all_tasks() - before == set()
    print(
        f"\nchaos seed {seed}: {CHAOS_TURNS} turns, {sum(chaos.calls.values())} summarizer "
        f"calls {dict(chaos.calls)}; {len(chaos.installed)} summaries installed; "
        f"{len(kept)} kept, {state['dropped_turns']} dropped and counted; "
        f"{sum(chaos.callbacks.values())} callbacks"
    )


def _awaits_the_summarizer(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is in a call of the chaos summarizer, however deep it is awaited."""
    coro: Any = task.get_coro()
    while coro is not None:
        if "Chaos.summarizer" in repr(coro):
            return True
        coro = getattr(coro, "cr_await", None)
    return False
