"""The watermark of the reference memory: no forget gap (spec group WM)."""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Mapping
from typing import Any

import anyio
import pytest
from support import make_turn, rolling_config, until, users, view_of

from reference_impl import (
    DefaultShortTermMemory,
    MemoryHealth,
    ShortTermMemoryConfig,
)

rolling = functools.partial(rolling_config, degraded_retry_interval_s=3600.0)


class GatedSummarizer:
    """Records every call; each call waits for its own release. Summary = previous + users."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self.gates: list[asyncio.Event] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, payload: Mapping[str, Any]) -> Mapping[str, Any]:
        self.payloads.append(dict(payload))
        gate = asyncio.Event()
        self.gates.append(gate)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await gate.wait()
        finally:
            self.in_flight -= 1
        return {"summary": summary_after(payload)}

    async def started(self, calls: int) -> None:
        await until(lambda: len(self.payloads) >= calls)

    def release(self, call: int) -> None:
        self.gates[call - 1].set()


def summary_after(payload: Mapping[str, Any]) -> str:
    previous: str = payload["previous_summary"]
    return f"{previous} {' '.join(users(payload['turns']))}".strip()


@pytest.mark.anyio
@pytest.mark.requirement("WM-001")
async def test_add_turn_returns_while_the_summarizer_is_in_flight() -> None:
    summarizer = GatedSummarizer()
    memory = DefaultShortTermMemory(config=rolling(), summarizer=summarizer)
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await summarizer.started(1)
    with anyio.fail_after(5):  # a hang here means add_turn waited for the blocked call
        for index in range(2, 20):
            await memory.add_turn(make_turn(index))
    assert summarizer.in_flight == 1
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("WM-002", "WM-003", "WM-004", "WM-005")
async def test_turns_evicted_during_a_blocked_call_stay_pending_after_it_completes() -> None:
    summarizer = GatedSummarizer()
    memory = DefaultShortTermMemory(config=rolling(), summarizer=summarizer)
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))  # evicts u0: call 1 gets [u0] and blocks
    await summarizer.started(1)
    assert users(summarizer.payloads[0]["turns"]) == ["u0"]
    for index in range(2, 5):  # evicts u1, u2, u3 while call 1 is blocked
        await memory.add_turn(make_turn(index))
    view = await view_of(memory)
    assert users(view["pending_turns"]) == ["u0", "u1", "u2", "u3"]  # WM-002
    assert users(view["recent_turns"]) == ["u4"]

    summarizer.release(1)
    await summarizer.started(2)
    view = await view_of(memory)
    # WM-003: exactly the turns sent to call 1 left pending; the others stayed.
    assert view["summary"] == "u0"
    assert users(view["pending_turns"]) == ["u1", "u2", "u3"]
    # WM-004: call 2 has the rest, in order, chained on the installed summary.
    assert summarizer.payloads[1] == {
        "previous_summary": "u0",
        "turns": [{"user": f"u{i}", "assistant": f"a{i}"} for i in (1, 2, 3)],
    }
    await memory.add_turn(make_turn(5))  # evicts u4 while call 2 is blocked
    summarizer.release(2)
    await summarizer.started(3)
    view = await view_of(memory)
    assert view["summary"] == "u0 u1 u2 u3"
    assert users(view["pending_turns"]) == ["u4"]
    assert summarizer.payloads[2]["previous_summary"] == "u0 u1 u2 u3"
    summarizer.release(3)
    await asyncio.wait_for(memory.flush(), timeout=5)
    view = await view_of(memory)
    assert view == {
        "summary": "u0 u1 u2 u3 u4",
        "recent_turns": [{"user": "u5", "assistant": "a5"}],
    }
    assert summarizer.max_in_flight == 1
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("WM-004", "CON-001")
@pytest.mark.parametrize("seed", range(5))
async def test_every_turn_is_summarized_exactly_once_in_order(seed: int) -> None:
    """Random interleavings of adds and slow/fast summarizer calls."""
    rng = random.Random(seed)
    payloads: list[dict[str, Any]] = []
    in_flight = 0
    max_in_flight = 0

    async def summarize(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        nonlocal in_flight, max_in_flight
        payloads.append(dict(payload))
        in_flight += 1
        max_in_flight = max(max_in_flight, in_flight)
        for _ in range(rng.randrange(4)):
            await asyncio.sleep(0)
        in_flight -= 1
        return {"summary": summary_after(payload)}

    memory = DefaultShortTermMemory(config=rolling(full_zone_turns=2), summarizer=summarize)
    for index in range(60):
        await memory.add_turn(make_turn(index))
        for _ in range(rng.randrange(3)):
            await asyncio.sleep(0)
    await asyncio.wait_for(memory.flush(), timeout=5)

    sent = [user for payload in payloads for user in users(payload["turns"])]
    assert sent == [f"u{i}" for i in range(58)]  # the 2 newest are still recent
    previous = ""
    for payload in payloads:
        assert payload["previous_summary"] == previous
        previous = summary_after(payload)
    assert (await view_of(memory))["summary"] == previous
    assert max_in_flight == 1
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("WM-004", "HLT-002")
async def test_a_failed_calls_turns_are_sent_again_with_the_newer_ones() -> None:
    payloads: list[dict[str, Any]] = []

    async def fail_first(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        payloads.append(dict(payload))
        if len(payloads) == 1:
            await asyncio.sleep(0.01)  # u2 is evicted meanwhile
            raise RuntimeError("backend down")
        return {"summary": summary_after(payload)}

    memory = DefaultShortTermMemory(config=rolling(), summarizer=fail_first)
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await until(lambda: len(payloads) == 1)
    await memory.add_turn(make_turn(2))
    await until(lambda: memory.health is MemoryHealth.HEALTHY and len(payloads) == 2)
    await asyncio.wait_for(memory.flush(), timeout=5)
    assert users(payloads[0]["turns"]) == ["u0"]
    assert users(payloads[1]["turns"]) == ["u0", "u1"]
    assert payloads[1]["previous_summary"] == ""
    assert (await view_of(memory))["summary"] == "u0 u1"
    await memory.aclose()


# ------------------------------------------------------------------------ flush


@pytest.mark.anyio
@pytest.mark.requirement("WM-007")
async def test_flush_waits_for_the_turns_pending_at_call_time_only() -> None:
    summarizer = GatedSummarizer()
    memory = DefaultShortTermMemory(config=rolling(), summarizer=summarizer)
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await summarizer.started(1)  # call 1 has u0 and blocks
    await memory.add_turn(make_turn(2))  # u1 pending
    flush = asyncio.create_task(memory.flush())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not flush.done()  # u0 and u1 are not covered yet
    summarizer.release(1)
    await summarizer.started(2)  # call 2 has u1
    await memory.add_turn(make_turn(3))  # u2 becomes pending after flush started
    assert not flush.done()
    summarizer.release(2)
    await asyncio.wait_for(flush, timeout=5)
    # Flush returned with u2 still pending: it was not pending when flush was called.
    await summarizer.started(3)
    view = await view_of(memory)
    assert view["summary"] == "u0 u1"
    assert users(view["pending_turns"]) == ["u2"]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("WM-007")
@pytest.mark.parametrize("strategy", ["none", "truncation"])
async def test_flush_returns_at_once_for_other_strategies(strategy: str) -> None:
    memory = DefaultShortTermMemory(config=ShortTermMemoryConfig(strategy=strategy))  # type: ignore[arg-type]
    await memory.add_turn(make_turn(0))
    with anyio.fail_after(1):
        await memory.flush()
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("WM-007")
async def test_flush_returns_at_once_with_nothing_pending() -> None:
    summarizer = GatedSummarizer()
    memory = DefaultShortTermMemory(config=rolling(full_zone_turns=3), summarizer=summarizer)
    await memory.add_turn(make_turn(0))
    with anyio.fail_after(1):
        await memory.flush()
    assert summarizer.payloads == []
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("WM-007", "HLT-004")
async def test_flush_returns_when_the_memory_degrades() -> None:
    async def failing(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        raise RuntimeError("backend down")

    memory = DefaultShortTermMemory(config=rolling(retry_attempts=2), summarizer=failing)
    for index in range(3):
        await memory.add_turn(make_turn(index))
    await asyncio.wait_for(memory.flush(), timeout=5)
    assert memory.health is MemoryHealth.DEGRADED
    assert [t["user_message"] for t in memory.to_dict()["backlog"]] == ["u0", "u1"]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("WM-007")
async def test_flush_returns_when_the_state_is_replaced_meanwhile() -> None:
    """A flush waiting on turns that ``from_dict`` removed must not wait forever."""
    summarizer = GatedSummarizer()
    memory = DefaultShortTermMemory(config=rolling(), summarizer=summarizer)
    empty = memory.to_dict()
    for index in range(3):
        await memory.add_turn(make_turn(index))
    await summarizer.started(1)
    flush = asyncio.create_task(memory.flush())
    await asyncio.sleep(0)
    memory.from_dict(empty)
    summarizer.release(1)  # its result belongs to the replaced state and is discarded
    await asyncio.wait_for(flush, timeout=5)
    assert await view_of(memory) == {"recent_turns": []}
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("WM-004")
async def test_a_call_the_replaced_state_began_never_reaches_the_summarizer() -> None:
    """The worker took a batch and started its call, but the summarizer had not run yet when
    ``from_dict`` replaced the state. A call reaching the summarizer after ``from_dict``
    returned would send the loaded state's turns a second time: its outcome is dropped and
    the loaded state sends them again (two successful calls for one turn)."""
    summarizer = GatedSummarizer()
    memory = DefaultShortTermMemory(config=rolling(), summarizer=summarizer)
    for index in range(3):
        await memory.add_turn(make_turn(index))
    await asyncio.sleep(0)  # the worker takes u0 and u1 and starts the call
    assert summarizer.payloads == []  # ... which has not reached the summarizer yet
    memory.from_dict(memory.to_dict())

    async def release_all() -> None:
        while True:
            for gate in summarizer.gates:
                gate.set()
            await asyncio.sleep(0.001)

    releasing = asyncio.create_task(release_all())
    await asyncio.wait_for(memory.flush(), timeout=5)
    releasing.cancel()
    assert [users(p["turns"]) for p in summarizer.payloads] == [["u0", "u1"]]
    assert memory.to_dict()["summary"] == "u0 u1"
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("WM-008", "HLT-007", "HLT-008")
@pytest.mark.parametrize("retry_attempts", [0, 1])
async def test_hung_summarizer_times_out_and_flush_returns(retry_attempts: int) -> None:
    calls = 0

    async def hung(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        nonlocal calls
        calls += 1
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    config = rolling(summarizer_timeout_s=0.05, retry_attempts=retry_attempts)
    memory = DefaultShortTermMemory(config=config, summarizer=hung)
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await asyncio.wait_for(memory.flush(), timeout=5)
    assert memory.health is MemoryHealth.DEGRADED
    assert calls == retry_attempts + 1
    assert [t["user_message"] for t in memory.to_dict()["backlog"]] == ["u0"]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("WM-005", "STR-003")
async def test_view_orders_summary_pending_recent() -> None:
    summarizer = GatedSummarizer()
    memory = DefaultShortTermMemory(config=rolling(full_zone_turns=2), summarizer=summarizer)
    for index in range(3):
        await memory.add_turn(make_turn(index))
    await summarizer.started(1)
    summarizer.release(1)
    await until(lambda: memory.to_dict()["summary"] == "u0")
    await memory.add_turn(make_turn(3))
    await memory.add_turn(make_turn(4))
    await summarizer.started(2)
    view = await view_of(memory)
    assert set(view) == {"summary", "pending_turns", "recent_turns"}
    assert view["summary"] == "u0"
    assert users(view["pending_turns"]) == ["u1", "u2"]
    assert users(view["recent_turns"]) == ["u3", "u4"]
    await memory.aclose()


@pytest.mark.anyio
async def test_the_ids_of_turns_that_leave_the_memory_are_remembered_newest_last() -> None:
    """Summarized, dropped from a full backlog, dropped by a window: ``departed_turn_ids``
    lists them in the order they left (the session layer finds a landed turn by it)."""

    def turn(index: int) -> Any:
        return make_turn(index, turn_id=f"id-{index}")

    async def joining(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"summary": summary_after(payload)}

    memory = DefaultShortTermMemory(config=rolling(), summarizer=joining)
    await memory.add_turn(turn(0))
    assert "departed_turn_ids" not in memory.to_dict()  # written only when there are any
    for index in range(1, 4):
        await memory.add_turn(turn(index))
    await memory.flush()
    assert memory.to_dict()["departed_turn_ids"] == ["id-0", "id-1", "id-2"]
    await memory.add_turn(make_turn(4))  # no id: nothing to remember when it leaves
    await memory.add_turn(turn(5))
    await memory.flush()
    assert memory.to_dict()["departed_turn_ids"] == ["id-0", "id-1", "id-2", "id-3"]
    await memory.aclose()

    down = True

    async def failing(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        if down:
            raise RuntimeError("down")
        return {"summary": summary_after(payload)}

    config = rolling_config(
        degraded_retry_interval_s=0.01, retry_attempts=0, recovery_backlog_limit=2
    )
    degraded = DefaultShortTermMemory(config=config, summarizer=failing)
    for index in range(6):
        await degraded.add_turn(turn(index))
        await degraded.flush()
    state = degraded.to_dict()
    assert [t["turn_id"] for t in state["backlog"]] == ["id-3", "id-4"]
    assert state["departed_turn_ids"] == ["id-0", "id-1", "id-2"]  # dropped, oldest first
    down = False  # the next recovery covers the backlog: those turns leave too, once each
    await until(lambda: degraded.health is MemoryHealth.HEALTHY)
    assert degraded.to_dict()["departed_turn_ids"] == [f"id-{i}" for i in range(5)]
    await degraded.aclose()

    window = ShortTermMemoryConfig(strategy="truncation", budget=rolling().budget)
    truncating = DefaultShortTermMemory(config=window)
    for index in range(3):
        await truncating.add_turn(turn(index))
    assert truncating.to_dict()["departed_turn_ids"] == ["id-0", "id-1"]
    await truncating.aclose()
