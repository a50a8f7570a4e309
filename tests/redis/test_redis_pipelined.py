"""The next summarizer call starts as the last returns, on its outcome shown but not yet
written: outcomes the newest state refuses or changes must not cost a turn or a count
(fakeredis, two instances on one session)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import fakeredis
import pytest
from stm_redis import RedisShortTermMemory

from reference_impl import MemoryBudget, ShortTermMemoryConfig
from stm_conformance.checks import eventually, turn

pytestmark = pytest.mark.anyio

MemoryFactory = Callable[..., RedisShortTermMemory]


def _config(**budget: Any) -> Any:
    extra = {k: budget.pop(k) for k in list(budget) if k not in MemoryBudget.__slots__}
    return ShortTermMemoryConfig(strategy="rolling_summary", budget=MemoryBudget(**budget), **extra)


class Calls:
    """A summarizer that records the turns of each call; ``gate`` holds calls."""

    def __init__(self, summary: Callable[[list[str], str], str]) -> None:
        self.sent: list[tuple[list[str], str]] = []
        self.summary = summary
        self.fail = False
        self.gate: asyncio.Event | None = None

    async def __call__(self, payload: Any) -> Any:
        users = [t["user"][:3] for t in payload["turns"]]
        self.sent.append((users, payload["previous_summary"]))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise RuntimeError("scripted failure")
        return {"summary": self.summary(users, payload["previous_summary"])}


def _held(state: dict[str, Any]) -> list[str]:
    parts = ("turns", "pending", "backlog")
    return [t["user_message"][:3] for p in parts for t in state.get(p) or []]


async def test_a_summary_refused_on_the_newest_state_loses_no_turn(
    fake_memories: MemoryFactory,
) -> None:
    """WM-003 with ``overflow_policy="error"``: the holder shows its call's summary and
    starts the next call on it; the write then refuses the summary on the newest state
    (another instance added a large turn: BUD-007). The next call's summary must not
    take the refused call's turn off without a summary for it."""
    calls = Calls(lambda users, previous: "S" * 400 if len(calls.sent) == 1 else "s2")
    calls.gate = asyncio.Event()
    cfg = _config(
        full_zone_turns=1,
        summary_max_tokens=150,
        total_max_tokens=200,
        overflow_policy="error",
        retry_backoff_base_s=0.05,
    )
    a = fake_memories(cfg, summarizer=calls, lease_ttl_s=3.0)
    b = fake_memories(cfg, summarizer=calls, lease_ttl_s=3.0)
    await a.add_turn(turn(0))
    await a.add_turn(turn(1))  # u0 pending: the first call starts and is held

    async def started() -> bool:
        return bool(calls.sent)

    await eventually(started, what="the first call")
    await a.add_turn(turn(2))
    await b.add_turn(turn(3, pad=500))  # leaves no room for the first call's summary
    calls.gate.set()
    await asyncio.sleep(0.5)
    await a.flush()
    await b.flush()
    await b.get_llm_context()
    state = b.to_dict()
    covered = {u for users, _ in calls.sent[2:] for u in users}  # calls after the refused
    assert "u0" in _held(state) or "u0" in covered, (calls.sent, state["summary"])
    assert state["summary"] != "S" * 400


async def test_a_recovery_on_a_stale_view_counts_no_summarized_turn_as_dropped(
    fake_memories: MemoryFactory, fake_server: Any
) -> None:
    """HLT-005: the holder waits out the DEGRADED interval holding the lease while the
    other instance's turns push turns out of the full backlog. The turns the holder's
    calls then summarize are not counted as dropped: ``dropped_turns`` is the number of
    turns held nowhere and in no summary."""
    calls = Calls(lambda users, previous: ",".join([previous, *users]).strip(","))
    calls.fail = True
    cfg = _config(
        full_zone_turns=1,
        retry_attempts=0,
        degraded_retry_interval_s=0.3,
        recovery_backlog_limit=2,
    )
    a = fake_memories(cfg, summarizer=calls, lease_ttl_s=3.0)
    b = fake_memories(cfg, summarizer=calls, lease_ttl_s=3.0)
    raw = fakeredis.FakeAsyncRedis(server=fake_server)

    def stored(health: str) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            doc = await raw.hget(a.redis_key, "doc")
            return bool(doc) and json.loads(doc)["state"]["health"] == health

        return check

    await a.add_turn(turn(0))
    await a.add_turn(turn(1))  # u0's call fails: DEGRADED
    await eventually(stored("degraded"), what="DEGRADED")
    await b.add_turn(turn(2))
    await b.add_turn(turn(3))  # backlog [u1, u2]; u0 dropped
    calls.fail, calls.gate = False, asyncio.Event()

    async def recovering() -> bool:
        return len(calls.sent) == 2

    await eventually(recovering, what="the recovery call")
    await eventually(stored("recovering"), what="RECOVERING")
    await b.add_turn(turn(4))
    await b.add_turn(turn(5))  # u1 and u2 pushed out of the backlog too
    calls.gate.set()
    calls.gate = None
    await asyncio.sleep(0.3)
    await b.flush()
    await a.flush()
    await b.get_llm_context()
    state = b.to_dict()
    summarized = {u for u in state["summary"].split(",") if u}
    lost = [f"u{i}" for i in range(6) if f"u{i}" not in summarized | set(_held(state))]
    assert state["dropped_turns"] == len(lost), (calls.sent, state["summary"], lost)
    await raw.aclose()
