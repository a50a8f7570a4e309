"""Callbacks of the reference memory: exactly once, in order, fire-and-forget (group CB)."""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
from collections.abc import Mapping
from typing import Any

import anyio
import pytest
from support import (
    DEGRADED,
    HEALTHY,
    RECOVERING,
    RETRY,
    install_loop_error_recorder,
    make_turn,
    rolling_config,
    until,
)

from reference_impl import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    MemoryHealth,
    ShortTermMemoryConfig,
)

rolling = functools.partial(rolling_config, degraded_retry_interval_s=0.001)


class Summaries:
    """Summarizer that fails the calls whose numbers are in ``fail``; summary = call number."""

    def __init__(self, fail: set[int] | None = None) -> None:
        self.fail = fail or set()
        self.calls = 0

    async def __call__(self, payload: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls += 1
        if self.calls in self.fail:
            raise RuntimeError(f"call {self.calls} fails")
        return {"summary": f"s{self.calls}"}


@pytest.mark.anyio
@pytest.mark.requirement("CB-001")
async def test_on_turn_added_runs_once_per_stored_turn_in_order() -> None:
    seen: list[str] = []

    async def on_turn_added(turn: ConversationTurn) -> None:
        await asyncio.sleep(0)  # interleave with the adds
        seen.append(turn.user_message)

    memory = DefaultShortTermMemory(
        config=rolling(on_turn_added=on_turn_added), summarizer=Summaries()
    )
    for index in range(30):
        await memory.add_turn(make_turn(index))
        if index % 7 == 0:
            await asyncio.sleep(0)
    await until(lambda: len(seen) == 30)
    await asyncio.sleep(0.01)
    assert seen == [f"u{i}" for i in range(30)]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("CB-001", "STR-001")
async def test_on_turn_added_is_not_called_when_nothing_is_stored() -> None:
    seen: list[str] = []

    async def on_turn_added(turn: ConversationTurn) -> None:
        seen.append(turn.user_message)

    memory = DefaultShortTermMemory(config=ShortTermMemoryConfig(on_turn_added=on_turn_added))
    await memory.add_turn(make_turn(0))
    await asyncio.sleep(0.01)
    assert seen == []
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("CB-002")
async def test_on_summary_updated_runs_once_per_installed_summary() -> None:
    updates: list[tuple[str, str]] = []

    async def on_summary_updated(old: str, new: str) -> None:
        updates.append((old, new))

    memory = DefaultShortTermMemory(
        config=rolling(on_summary_updated=on_summary_updated, retry_attempts=3),
        summarizer=Summaries(fail={2}),
    )
    for index in range(4):
        await memory.add_turn(make_turn(index))
        await asyncio.wait_for(memory.flush(), timeout=5)
    await asyncio.sleep(0.01)
    # Call 2 failed and installed nothing; its turns went to call 3.
    assert updates == [("", "s1"), ("s1", "s3"), ("s3", "s4")]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("CB-003")
async def test_on_health_changed_runs_once_per_transition_in_order() -> None:
    changes: list[tuple[MemoryHealth, MemoryHealth]] = []

    async def on_health_changed(old: MemoryHealth, new: MemoryHealth) -> None:
        await asyncio.sleep(0)
        changes.append((old, new))

    # Calls 1-3 fail (RETRY, RETRY again: no callback, then DEGRADED); recovery 4 fails,
    # recovery 5 succeeds.
    summarizer = Summaries(fail={1, 2, 3, 4})
    memory = DefaultShortTermMemory(
        config=rolling(retry_attempts=2, on_health_changed=on_health_changed), summarizer=summarizer
    )
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await until(lambda: memory.health is HEALTHY and summarizer.calls == 5)
    await until(lambda: len(changes) == 6)
    await asyncio.sleep(0.01)
    assert changes == [
        (HEALTHY, RETRY),
        (RETRY, DEGRADED),
        (DEGRADED, RECOVERING),
        (RECOVERING, DEGRADED),
        (DEGRADED, RECOVERING),
        (RECOVERING, HEALTHY),
    ]
    assert all(old is not new for old, new in changes)
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("CB-004", "WM-001")
async def test_slow_callbacks_never_delay_the_memory() -> None:
    release = asyncio.Event()
    seen: list[str] = []
    updates: list[str] = []

    async def slow_turn(turn: ConversationTurn) -> None:
        await release.wait()
        seen.append(turn.user_message)

    async def slow_summary(old: str, new: str) -> None:
        await release.wait()
        updates.append(new)

    memory = DefaultShortTermMemory(
        config=rolling(on_turn_added=slow_turn, on_summary_updated=slow_summary),
        summarizer=Summaries(),
    )
    with anyio.fail_after(5):  # neither add_turn nor flush waits for a callback
        for index in range(5):
            await memory.add_turn(make_turn(index))
            await memory.flush()
    assert memory.to_dict()["summary"] == "s4"
    assert seen == [] and updates == []
    release.set()
    await until(lambda: len(seen) == 5 and len(updates) == 4)
    assert seen == [f"u{i}" for i in range(5)]
    assert updates == ["s1", "s2", "s3", "s4"]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("CB-004")
async def test_raising_callbacks_are_logged_and_never_break_the_memory(
    caplog: pytest.LogCaptureFixture,
) -> None:
    errors = install_loop_error_recorder()
    calls = {"turn": 0, "summary": 0, "health": 0}

    async def bad_turn(turn: ConversationTurn) -> None:
        calls["turn"] += 1
        raise RuntimeError("observer bug")

    async def bad_summary(old: str, new: str) -> None:
        calls["summary"] += 1
        raise ValueError("observer bug")

    async def bad_health(old: MemoryHealth, new: MemoryHealth) -> None:
        calls["health"] += 1
        raise KeyError("observer bug")

    memory = DefaultShortTermMemory(
        config=rolling(
            on_turn_added=bad_turn,
            on_summary_updated=bad_summary,
            on_health_changed=bad_health,
            retry_attempts=1,
        ),
        summarizer=Summaries(fail={1}),
    )
    with caplog.at_level(logging.WARNING, logger="reference_impl.memory"):
        for index in range(4):
            await memory.add_turn(make_turn(index))
        await asyncio.wait_for(memory.flush(), timeout=5)
        await until(lambda: calls["turn"] == 4 and calls["health"] == 2 and calls["summary"] >= 1)
    assert memory.health is HEALTHY
    assert "callback raised" in caplog.text
    await memory.aclose()
    gc.collect()
    await asyncio.sleep(0)
    assert errors == []


@pytest.mark.anyio
@pytest.mark.requirement("CB-004", "CON-003")
async def test_aclose_cancels_blocked_callbacks() -> None:
    errors = install_loop_error_recorder()
    cancelled = asyncio.Event()

    async def stuck(turn: ConversationTurn) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    memory = DefaultShortTermMemory(config=rolling(on_turn_added=stuck), summarizer=Summaries())
    await memory.add_turn(make_turn(0))
    await asyncio.sleep(0)
    await memory.aclose()
    assert cancelled.is_set()
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("stm-")]
    gc.collect()
    await asyncio.sleep(0)
    assert errors == []


@pytest.mark.anyio
@pytest.mark.requirement("CB-001", "CB-004")
async def test_a_callback_raising_cancelled_error_stalls_no_later_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []

    async def on_turn_added(turn: ConversationTurn) -> None:
        seen.append(turn.user_message)
        if len(seen) == 1:
            raise asyncio.CancelledError  # the callback's own, not a cancellation of it

    memory = DefaultShortTermMemory(
        config=rolling(on_turn_added=on_turn_added), summarizer=Summaries()
    )
    with caplog.at_level(logging.WARNING, logger="reference_impl.memory"):
        for index in range(3):  # queued together: the second and third wait behind the first
            await memory.add_turn(make_turn(index))
        await until(lambda: len(seen) == 3)
    assert seen == [make_turn(i).user_message for i in range(3)]
    assert "raised CancelledError" in caplog.text
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("CON-003")
async def test_aclose_leaves_a_callback_that_ignores_cancellation_behind() -> None:
    async def stubborn(turn: ConversationTurn) -> None:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue

    memory = DefaultShortTermMemory(config=rolling(on_turn_added=stubborn), summarizer=Summaries())
    await memory.add_turn(make_turn(0))
    await asyncio.sleep(0)
    await asyncio.wait_for(memory.aclose(), timeout=5)
    for task in asyncio.all_tasks():  # the test's own loop must end: close what was left
        if task.get_name().startswith("stm-callback"):
            task.get_coro().close()


@pytest.mark.anyio
async def test_aclose_from_inside_a_callback_closes_everything() -> None:
    """An application closing the memory from ``on_turn_added`` (a goodbye turn): that
    ``aclose()`` returns, the other callback queues are closed too, and nothing is
    delivered after it (the queue used to cancel its own worker, and aclose with it)."""
    memory: DefaultShortTermMemory | None = None
    closed = asyncio.Event()
    summaries: list[str] = []

    async def on_turn_added(turn: ConversationTurn) -> None:
        if turn.user_message == "bye":
            assert memory is not None
            await memory.aclose()
            closed.set()

    async def on_summary_updated(old: str, new: str) -> None:
        await asyncio.sleep(0.1)  # a slow observer, still delivering when the memory closes
        summaries.append(new)

    async def summarizer(payload: Any) -> dict[str, str]:
        return {"summary": " ".join(t["user"] for t in payload["turns"])}

    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=1),
        on_turn_added=on_turn_added,
        on_summary_updated=on_summary_updated,
    )
    before = set(asyncio.all_tasks())
    memory = DefaultShortTermMemory(config=config, summarizer=summarizer)
    for user in ("a", "b", "c", "d"):
        await memory.add_turn(ConversationTurn(user, "x"))
        await asyncio.sleep(0)
    await memory.add_turn(ConversationTurn("bye", "x"))
    await asyncio.wait_for(closed.wait(), 2)
    await asyncio.sleep(0.05)
    left = {t for t in asyncio.all_tasks() - before if not t.done()} - {asyncio.current_task()}
    assert not left, f"tasks running after aclose() from a callback: {left}"
    delivered = len(summaries)
    await asyncio.sleep(0.3)
    assert len(summaries) == delivered, "a callback ran after aclose() returned"
