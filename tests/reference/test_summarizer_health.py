"""Summarizer health of the reference memory: retry, degrade, backlog, recovery (group HLT)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from support import (
    DEGRADED,
    HEALTHY,
    RECOVERING,
    RETRY,
    make_turn,
    rolling_config,
    until,
    users,
    view_of,
)

from reference_impl import (
    DefaultShortTermMemory,
    MemoryHealth,
)

rolling = functools.partial(rolling_config, degraded_retry_interval_s=3600.0)


class ScriptedSummarizer:
    """Fails while ``failing`` is true; otherwise summarizes. Optionally gated per call."""

    def __init__(self, failures: int = 0, *, gated: bool = False) -> None:
        self.failures_left = failures
        self.gated = gated
        self.payloads: list[dict[str, Any]] = []
        self.started_at: list[float] = []
        self.gate = asyncio.Event()

    async def __call__(self, payload: Mapping[str, Any]) -> Mapping[str, Any]:
        self.payloads.append(dict(payload))
        self.started_at.append(time.monotonic())
        if self.gated:
            await self.gate.wait()
            self.gate.clear()
        if self.failures_left:
            self.failures_left -= 1
            raise RuntimeError("summarizer backend unavailable")
        text = " ".join(users(payload["turns"]))
        return {"summary": f"{payload['previous_summary']} {text}".strip()}

    async def started(self, calls: int) -> None:
        await until(lambda: len(self.payloads) >= calls)


@pytest.mark.anyio
@pytest.mark.requirement("HLT-001")
async def test_new_memory_is_healthy() -> None:
    memory = DefaultShortTermMemory(config=rolling(), summarizer=ScriptedSummarizer())
    assert memory.health is HEALTHY
    assert memory.health.value == "healthy"
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("HLT-002", "HLT-003", "HLT-004")
@pytest.mark.parametrize("failures", [1, 2, 3])
async def test_summarizer_that_fails_n_times_then_recovers_without_new_turns(failures: int) -> None:
    summarizer = ScriptedSummarizer(failures, gated=True)
    changes: list[tuple[MemoryHealth, MemoryHealth]] = []

    async def on_health_changed(old: MemoryHealth, new: MemoryHealth) -> None:
        changes.append((old, new))

    memory = DefaultShortTermMemory(
        config=rolling(retry_attempts=3, on_health_changed=on_health_changed), summarizer=summarizer
    )
    for index in range(3):  # u0, u1 pending in one call
        await memory.add_turn(make_turn(index))
    await summarizer.started(1)
    for attempt in range(1, failures + 1):
        summarizer.gate.set()
        await summarizer.started(attempt + 1)  # the memory retries by itself (HLT-002)
        assert memory.health is RETRY
        # HLT-003: in RETRY the view still shows the pending turns.
        assert users((await view_of(memory))["pending_turns"]) == ["u0", "u1"]
    summarizer.gate.set()
    await until(lambda: memory.health is HEALTHY)  # HLT-004: success in RETRY -> HEALTHY
    view = await view_of(memory)
    assert view["summary"] == "u0 u1"
    assert "pending_turns" not in view
    assert all(users(p["turns"]) == ["u0", "u1"] for p in summarizer.payloads)
    await until(lambda: len(changes) == 2)
    assert changes == [(HEALTHY, RETRY), (RETRY, HEALTHY)]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("HLT-003")
async def test_retry_view_keeps_the_last_good_summary() -> None:
    summarizer = ScriptedSummarizer(gated=True)
    memory = DefaultShortTermMemory(
        config=rolling(retry_backoff_base_s=3600.0), summarizer=summarizer
    )
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await summarizer.started(1)
    summarizer.gate.set()
    await until(lambda: memory.to_dict()["summary"] == "u0")
    summarizer.failures_left = 1
    await memory.add_turn(make_turn(2))
    await summarizer.started(2)
    summarizer.gate.set()
    await until(lambda: memory.health is RETRY)
    view = await view_of(memory)
    assert view == {
        "summary": "u0",
        "pending_turns": [{"user": "u1", "assistant": "a1"}],
        "recent_turns": [{"user": "u2", "assistant": "a2"}],
    }
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("HLT-002")
async def test_retry_n_starts_after_base_times_two_to_the_n_minus_one() -> None:
    base = 0.02
    summarizer = ScriptedSummarizer(failures=3)
    memory = DefaultShortTermMemory(
        config=rolling(retry_attempts=3, retry_backoff_base_s=base), summarizer=summarizer
    )
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await until(lambda: memory.health is HEALTHY and len(summarizer.payloads) == 4)
    gaps = [b - a for a, b in zip(summarizer.started_at, summarizer.started_at[1:], strict=False)]
    # Lower bounds only: a retry never starts before its backoff has elapsed.
    for n, gap in enumerate(gaps, start=1):
        assert gap >= base * 2 ** (n - 1)
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("HLT-004")
@pytest.mark.parametrize("retry_attempts", [0, 1, 3])
async def test_degrades_after_retry_attempts_plus_one_failures(retry_attempts: int) -> None:
    summarizer = ScriptedSummarizer(failures=10_000)
    changes: list[tuple[MemoryHealth, MemoryHealth]] = []

    async def on_health_changed(old: MemoryHealth, new: MemoryHealth) -> None:
        changes.append((old, new))

    memory = DefaultShortTermMemory(
        config=rolling(
            retry_attempts=retry_attempts, full_zone_turns=2, on_health_changed=on_health_changed
        ),
        summarizer=summarizer,
    )
    for index in range(4):
        await memory.add_turn(make_turn(index))
    await asyncio.wait_for(memory.flush(), timeout=5)
    assert memory.health is DEGRADED
    assert len(summarizer.payloads) == retry_attempts + 1
    # The view shows recent turns only; the pending turns moved to the backlog.
    assert await view_of(memory) == {
        "recent_turns": [{"user": "u2", "assistant": "a2"}, {"user": "u3", "assistant": "a3"}]
    }
    state = memory.to_dict()
    assert state["pending"] == []
    assert users(state["backlog"], "user_message") == ["u0", "u1"]
    await until(lambda: len(changes) == (2 if retry_attempts else 1))
    expected = [(HEALTHY, RETRY), (RETRY, DEGRADED)] if retry_attempts else [(HEALTHY, DEGRADED)]
    assert changes == expected
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("HLT-005", "CON-001")
async def test_degraded_backlog_is_capped_and_drops_are_counted() -> None:
    summarizer = ScriptedSummarizer(failures=10_000)
    memory = DefaultShortTermMemory(
        config=rolling(retry_attempts=0, recovery_backlog_limit=3), summarizer=summarizer
    )
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await asyncio.wait_for(memory.flush(), timeout=5)
    assert memory.health is DEGRADED
    for index in range(2, 10):
        await memory.add_turn(make_turn(index))
    state = memory.to_dict()
    # u0..u8 were evicted; the 3 newest are kept, the 6 oldest dropped and counted.
    assert users(state["backlog"], "user_message") == ["u6", "u7", "u8"]
    assert state["dropped_turns"] == 6
    assert memory.dropped_turns == 6
    retained = len(state["turns"]) + len(state["pending"]) + len(state["backlog"])
    assert retained + state["dropped_turns"] == 10
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("HLT-005")
async def test_a_loaded_backlog_is_cut_to_this_memorys_limit_and_the_drops_counted() -> None:
    summarizer = ScriptedSummarizer(failures=10_000)
    wide = rolling(retry_attempts=0, recovery_backlog_limit=10)
    memory = DefaultShortTermMemory(config=wide, summarizer=summarizer)
    for index in range(10):
        await memory.add_turn(make_turn(index))
    await until(lambda: memory.health is DEGRADED)
    state = memory.to_dict()
    assert len(state["backlog"]) == 9 and state["dropped_turns"] == 0
    narrow = DefaultShortTermMemory(
        config=rolling(retry_attempts=0, recovery_backlog_limit=3), summarizer=summarizer
    )
    narrow.from_dict(state)
    loaded = narrow.to_dict()
    assert users(loaded["backlog"], "user_message") == ["u6", "u7", "u8"]
    assert loaded["dropped_turns"] == narrow.dropped_turns == 6
    await memory.aclose()
    await narrow.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("HLT-006")
async def test_recovery_is_attempted_by_the_memory_and_returns_to_healthy() -> None:
    summarizer = ScriptedSummarizer(failures=1)
    changes: list[tuple[MemoryHealth, MemoryHealth]] = []

    async def on_health_changed(old: MemoryHealth, new: MemoryHealth) -> None:
        changes.append((old, new))

    memory = DefaultShortTermMemory(
        config=rolling(
            retry_attempts=0, degraded_retry_interval_s=0.01, on_health_changed=on_health_changed
        ),
        summarizer=summarizer,
    )
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await memory.add_turn(make_turn(2))  # u0 and u1 go to the call that fails
    await until(lambda: memory.health is HEALTHY and memory.to_dict()["summary"] != "")
    assert memory.to_dict()["summary"] == "u0 u1"
    assert memory.to_dict()["backlog"] == []
    await until(lambda: len(changes) == 3)
    assert changes == [(HEALTHY, DEGRADED), (DEGRADED, RECOVERING), (RECOVERING, HEALTHY)]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("HLT-006", "WM-003")
async def test_turns_evicted_during_recovery_become_pending() -> None:
    summarizer = ScriptedSummarizer(failures=1, gated=True)
    memory = DefaultShortTermMemory(
        config=rolling(retry_attempts=0, degraded_retry_interval_s=0.001), summarizer=summarizer
    )
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await summarizer.started(1)
    summarizer.gate.set()  # call 1 fails: DEGRADED, u0 in the backlog
    await summarizer.started(2)  # the recovery call, blocked
    assert memory.health is RECOVERING
    assert users(summarizer.payloads[1]["turns"]) == ["u0"]
    await memory.add_turn(make_turn(2))  # u1 evicted while recovering: to the backlog
    assert await view_of(memory) == {"recent_turns": [{"user": "u2", "assistant": "a2"}]}
    summarizer.gate.set()
    await until(lambda: memory.health is HEALTHY)
    view = await view_of(memory)
    assert view["summary"] == "u0"
    assert users(view["pending_turns"]) == ["u1"]
    await summarizer.started(3)  # u1 is summarized next, as an ordinary pending turn
    assert users(summarizer.payloads[2]["turns"]) == ["u1"]
    assert summarizer.payloads[2]["previous_summary"] == "u0"
    summarizer.gate.set()
    await asyncio.wait_for(memory.flush(), timeout=5)
    assert (await view_of(memory))["summary"] == "u0 u1"
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("HLT-006")
async def test_recovery_waits_for_the_interval_on_the_memorys_clock() -> None:
    """With a frozen clock no recovery starts, however much real time passes."""
    now = [0.0]
    interval = 0.01
    summarizer = ScriptedSummarizer(failures=2)
    changes: list[tuple[MemoryHealth, MemoryHealth]] = []

    async def on_health_changed(old: MemoryHealth, new: MemoryHealth) -> None:
        changes.append((old, new))

    memory = DefaultShortTermMemory(
        config=rolling(
            retry_attempts=0,
            degraded_retry_interval_s=interval,
            on_health_changed=on_health_changed,
        ),
        summarizer=summarizer,
        time_source=lambda: now[0],
    )
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await summarizer.started(1)
    await until(lambda: memory.health is DEGRADED)
    await asyncio.sleep(10 * interval)  # real time passes; the memory's clock does not
    assert len(summarizer.payloads) == 1

    now[0] += interval  # first recovery allowed: it fails
    await summarizer.started(2)
    await until(lambda: memory.health is DEGRADED)
    await asyncio.sleep(10 * interval)
    assert len(summarizer.payloads) == 2  # at most one attempt per interval

    now[0] += interval / 2
    await asyncio.sleep(5 * interval)
    assert len(summarizer.payloads) == 2
    now[0] += interval / 2  # second recovery allowed: it succeeds
    await until(lambda: memory.health is HEALTHY)
    assert len(summarizer.payloads) == 3
    assert memory.to_dict()["summary"] == "u0"
    await until(lambda: len(changes) == 5)
    assert changes == [
        (HEALTHY, DEGRADED),
        (DEGRADED, RECOVERING),
        (RECOVERING, DEGRADED),
        (DEGRADED, RECOVERING),
        (RECOVERING, HEALTHY),
    ]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("HLT-006")
async def test_no_recovery_attempt_without_a_backlog() -> None:
    summarizer = ScriptedSummarizer(failures=1)
    memory = DefaultShortTermMemory(
        config=rolling(retry_attempts=0, degraded_retry_interval_s=0.001, full_zone_turns=1),
        summarizer=summarizer,
    )
    state = memory.to_dict()
    state["health"] = "degraded"
    memory.from_dict(state)  # degraded, empty backlog
    await asyncio.sleep(0.02)
    assert summarizer.payloads == []
    assert memory.health is DEGRADED
    await memory.aclose()


# ------------------------------------------------------------------------ invalid output


async def _hang(payload: Mapping[str, Any]) -> Any:
    await asyncio.Event().wait()


async def _raise_cancelled(payload: Mapping[str, Any]) -> Any:
    raise asyncio.CancelledError


def _returning(value: Any) -> Callable[[Mapping[str, Any]], Any]:
    async def summarize(payload: Mapping[str, Any]) -> Any:
        return value

    return summarize


def _raising(exc: BaseException) -> Callable[[Mapping[str, Any]], Any]:
    async def summarize(payload: Mapping[str, Any]) -> Any:
        raise exc

    return summarize


INVALID_SUMMARIZERS = {
    "none": _returning(None),
    "string": _returning("summary"),
    "list": _returning([("summary", "x")]),
    "no-summary-key": _returning({"text": "x"}),
    "summary-not-str": _returning({"summary": 42}),
    "summary-none": _returning({"summary": None}),
    "oversize": _returning({"summary": "x" * 4000}),
    "raises": _raising(RuntimeError("boom")),
    "raises-value-error": _raising(ValueError("bad")),
    "raises-cancelled": _raise_cancelled,
    "hangs": _hang,
}


@pytest.mark.anyio
@pytest.mark.requirement("HLT-007", "HLT-008", "BUD-007", "WM-008")
@pytest.mark.parametrize("kind", sorted(INVALID_SUMMARIZERS))
async def test_invalid_summarizer_output_counts_as_a_failure(kind: str) -> None:
    config = rolling(retry_attempts=2, retry_backoff_base_s=3600.0, summarizer_timeout_s=0.02)
    memory = DefaultShortTermMemory(config=config, summarizer=INVALID_SUMMARIZERS[kind])
    # HLT-008: nothing reaches the callers.
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await until(lambda: memory.health is RETRY)
    await memory.add_turn(make_turn(2))
    view = await view_of(memory)
    assert "summary" not in view
    assert users(view["pending_turns"]) == ["u0", "u1"]
    assert memory.estimate_tokens() > 0
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("HLT-008")
async def test_failures_never_reach_flush_callers() -> None:
    memory = DefaultShortTermMemory(
        config=rolling(retry_attempts=1), summarizer=_raising(RuntimeError("boom"))
    )
    for index in range(5):
        await memory.add_turn(make_turn(index))
        await memory.flush()
        await memory.get_llm_context()
        memory.estimate_tokens()
    assert memory.health is DEGRADED
    await memory.aclose()


@pytest.mark.requirement("HLT-005", "HLT-006")
@pytest.mark.anyio
async def test_turns_dropped_while_a_recovery_call_holds_them_are_not_counted() -> None:
    gate = asyncio.Event()
    calls: list[tuple[bool, list[str]]] = []  # (failed, the batch's user messages)
    failing = True

    async def summarizer(payload: Any) -> dict[str, str]:
        calls.append((failing, [t["user"] for t in payload["turns"]]))
        if failing:
            raise RuntimeError("down")
        await gate.wait()
        return {"summary": "covered"}

    config = rolling_config(
        degraded_retry_interval_s=0.01, retry_attempts=0, recovery_backlog_limit=2
    )
    async with DefaultShortTermMemory(config=config, summarizer=summarizer) as memory:
        await memory.add_turn(make_turn(0))
        await memory.add_turn(make_turn(1))  # u0 evicted; its call fails: DEGRADED
        await until(lambda: memory.health is DEGRADED)
        await memory.add_turn(make_turn(2))  # backlog u0, u1
        failing = False
        await until(lambda: memory.health is RECOVERING)  # the call holds u0, u1
        for i in range(3, 6):
            await memory.add_turn(make_turn(i))  # u0, u1, u2 pushed out of the backlog
        assert memory.dropped_turns == 3
        gate.set()
        await until(lambda: memory.health is HEALTHY)
        # u0 and u1 were in the recovery call: only u2 was lost. (On a busy machine a
        # recovery attempt may fail on u0 alone before u1 reaches the backlog.)
        recovery = [batch for failed, batch in calls if not failed]
        assert recovery[0] == ["u0", "u1"], calls
        assert memory.dropped_turns == 1


@pytest.mark.anyio
@pytest.mark.requirement("HLT-007", "WM-007")
@pytest.mark.parametrize("answer", ["raises", "none"])
async def test_an_estimator_failing_on_the_summary_fails_the_call(answer: str) -> None:
    # The summary cannot be known to fit its budget: the call failed, and flush() returns
    # once the memory is degraded instead of waiting on a worker that died.
    def estimator(text: str) -> int:
        if not text.startswith("u"):  # turns are measured, never the summary
            return len(text)
        if answer == "raises":
            raise RuntimeError("tokenizer unavailable")
        return None  # type: ignore[return-value]

    summarizer = ScriptedSummarizer()
    config = rolling(retry_attempts=1, token_estimator=estimator)
    memory = DefaultShortTermMemory(config=config, summarizer=summarizer)
    for index in range(3):
        await memory.add_turn(make_turn(index))
    await asyncio.wait_for(memory.flush(), 5)
    assert memory.health is DEGRADED
    assert len(summarizer.payloads) == 2  # the call and its one retry, each a failure
    assert "summary" not in await view_of(memory)
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("WM-007")
async def test_flush_raises_when_the_worker_crashes_instead_of_waiting_forever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reference_impl import watermark

    def broken_install(*args: Any) -> None:
        raise RuntimeError("a bug in the memory")

    memory = DefaultShortTermMemory(config=rolling(), summarizer=ScriptedSummarizer())
    with monkeypatch.context() as patch:
        patch.setattr(watermark, "install", broken_install)
        await memory.add_turn(make_turn(0))
        await memory.add_turn(make_turn(1))
        with pytest.raises(RuntimeError, match="the summarizer worker crashed"):
            await asyncio.wait_for(memory.flush(), 5)
    await asyncio.wait_for(memory.flush(), 5)  # the next flush starts a new worker
    assert "summary" in await view_of(memory)
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("HLT-002", "HLT-006")
@pytest.mark.parametrize("health", ["retry", "degraded"])
async def test_loading_a_state_again_and_again_brings_no_call_sooner(health: str) -> None:
    # A loaded state's timers restart from the load: five loads within a second of a
    # failure make no call before a 60 s backoff or recovery interval has passed.
    config = rolling(
        retry_attempts=5 if health == "retry" else 0,
        retry_backoff_base_s=60.0,
        degraded_retry_interval_s=60.0,
    )
    summarizer = ScriptedSummarizer(failures=100)
    memory = DefaultShortTermMemory(config=config, summarizer=summarizer)
    for index in range(4):
        await memory.add_turn(make_turn(index))
    await until(lambda: memory.health.value == health)
    calls = len(summarizer.payloads)
    for _ in range(5):
        memory.from_dict(memory.to_dict())
        await asyncio.sleep(0.01)
    assert len(summarizer.payloads) == calls
    assert memory.health.value == health
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("WM-007")
async def test_the_crash_of_a_worker_already_replaced_does_not_fail_flush() -> None:
    summarizer = ScriptedSummarizer(gated=True)
    memory = DefaultShortTermMemory(config=rolling(), summarizer=summarizer)
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await summarizer.started(1)  # the worker's call waits at the gate

    async def crash() -> None:
        raise RuntimeError("a bug in the memory")

    replaced = asyncio.ensure_future(crash())
    await asyncio.sleep(0)
    # The done callback of a worker that crashed and was replaced before the callback ran.
    memory._worker_ended(replaced)
    flushing = asyncio.ensure_future(memory.flush())
    await asyncio.sleep(0.05)
    assert not flushing.done(), flushing  # it waits for the running worker
    summarizer.gate.set()
    await asyncio.wait_for(flushing, 5)
    assert "summary" in await view_of(memory)
    await memory.aclose()
