"""Lifecycle, concurrency and input validation of the reference memory (group CON)."""

from __future__ import annotations

import asyncio
import functools
import gc
import math
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from support import (
    WAIT_S,
    blocked_summarizer,
    install_loop_error_recorder,
    make_turn,
    rolling_config,
    until,
)

from reference_impl import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryHealth,
    TrajectoryDigest,
)

rolling = functools.partial(rolling_config, full_zone_turns=2, degraded_retry_interval_s=0.001)


def memory_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("stm-") and not t.done()]


@pytest.mark.anyio
@pytest.mark.requirement("CON-003")
async def test_aclose_cancels_the_summarizer_and_callback_tasks() -> None:
    errors = install_loop_error_recorder()
    cancelled: list[str] = []

    async def hung(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.append("summarizer")
        raise AssertionError("unreachable")

    async def stuck_callback(*args: Any) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.append("callback")

    memory = DefaultShortTermMemory(
        config=rolling(on_turn_added=stuck_callback, summarizer_timeout_s=None), summarizer=hung
    )
    for index in range(4):
        await memory.add_turn(make_turn(index))
    await asyncio.sleep(0.01)
    assert {t.get_name() for t in memory_tasks()} == {
        "stm-summarizer",
        "stm-callback-on_turn_added",
    }
    await memory.aclose()
    assert sorted(cancelled) == ["callback", "summarizer"]
    assert memory_tasks() == []
    gc.collect()
    await asyncio.sleep(0)
    assert errors == []


@pytest.mark.anyio
@pytest.mark.requirement("CON-003")
@pytest.mark.parametrize(
    ("retry_attempts", "health"),
    [(3, MemoryHealth.RETRY), (0, MemoryHealth.DEGRADED)],
    ids=["retry-backoff", "recovery-interval"],
)
async def test_aclose_cancels_a_sleeping_worker(retry_attempts: int, health: MemoryHealth) -> None:
    errors = install_loop_error_recorder()

    async def failing(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        raise RuntimeError("down")

    memory = DefaultShortTermMemory(
        config=rolling(
            retry_attempts=retry_attempts,
            retry_backoff_base_s=3600.0,
            degraded_retry_interval_s=3600.0,
        ),
        summarizer=failing,
    )
    for index in range(4):
        await memory.add_turn(make_turn(index))
    await until(lambda: memory.health is health)
    await asyncio.sleep(0.01)
    assert [t.get_name() for t in memory_tasks()] == ["stm-summarizer"]  # asleep for an hour
    await memory.aclose()
    assert memory_tasks() == []
    gc.collect()
    await asyncio.sleep(0)
    assert errors == []


@pytest.mark.anyio
@pytest.mark.requirement("CON-003")
async def test_aclose_is_idempotent_and_works_as_a_context_manager() -> None:
    async with DefaultShortTermMemory(config=rolling(), summarizer=blocked_summarizer) as memory:
        for index in range(4):
            await memory.add_turn(make_turn(index))
        await asyncio.sleep(0)
    assert memory_tasks() == []
    await memory.aclose()
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("CON-003")
async def test_closed_memory_refuses_turns_but_still_answers() -> None:
    memory = DefaultShortTermMemory(config=rolling(), summarizer=blocked_summarizer)
    for index in range(3):
        await memory.add_turn(make_turn(index))
    await asyncio.sleep(0)
    view = await memory.get_llm_context()
    await memory.aclose()
    with pytest.raises(RuntimeError):
        await memory.add_turn(make_turn(3))
    with anyio.fail_after(WAIT_S):
        await memory.flush()  # pending turns remain, but a closed memory never waits
    assert await memory.get_llm_context() == view
    assert memory.to_dict()["pending"] != []
    assert memory_tasks() == []


@pytest.mark.anyio
@pytest.mark.requirement("CON-003", "WM-007")
async def test_aclose_releases_a_waiting_flush() -> None:
    memory = DefaultShortTermMemory(config=rolling(), summarizer=blocked_summarizer)
    for index in range(3):
        await memory.add_turn(make_turn(index))
    flush = asyncio.create_task(memory.flush())
    await asyncio.sleep(0.01)
    assert not flush.done()
    await memory.aclose()
    await asyncio.wait_for(flush, timeout=WAIT_S)


@pytest.mark.anyio
@pytest.mark.requirement("CON-001")
@pytest.mark.parametrize("failing", [False, True], ids=["healthy", "degraded"])
async def test_concurrent_add_turn_loses_no_turn(failing: bool) -> None:
    sent: list[str] = []

    async def summarize(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        await anyio.lowlevel.checkpoint()
        if failing:
            raise RuntimeError("down")
        sent.extend(turn["user"] for turn in payload["turns"])
        return {"summary": f"{len(sent)} turns"}

    memory = DefaultShortTermMemory(
        config=rolling(
            full_zone_turns=3,
            retry_attempts=0,
            recovery_backlog_limit=7,
            degraded_retry_interval_s=3600.0,
        ),
        summarizer=summarize,
    )
    count = 200

    async def add(index: int) -> None:
        await anyio.lowlevel.checkpoint()
        await memory.add_turn(make_turn(index))

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(add, index)
    await asyncio.wait_for(memory.flush(), timeout=WAIT_S)

    state = memory.to_dict()
    retained = [t["user_message"] for name in ("backlog", "pending", "turns") for t in state[name]]
    everything = sent + retained
    assert len(everything) == len(set(everything))  # nothing twice
    assert len(everything) + state["dropped_turns"] == count  # nothing lost uncounted
    if failing:
        assert memory.health is MemoryHealth.DEGRADED
        assert len(state["backlog"]) == 7 and state["dropped_turns"] > 0
    else:
        assert state["dropped_turns"] == 0 and len(state["turns"]) == 3
    await memory.aclose()


# ------------------------------------------------------------------------ bad input


def _turn(**changes: Any) -> ConversationTurn:
    turn = ConversationTurn(user_message="u", assistant_response="a")
    for name, value in changes.items():
        setattr(turn, name, value)
    return turn


def _digest(**changes: Any) -> ConversationTurn:
    digest = TrajectoryDigest(tools_invoked=["t"], observations_summary="o")
    for name, value in changes.items():
        setattr(digest, name, value)
    return _turn(trajectory_digest=digest)


BAD_TURNS: dict[str, Any] = {
    "none": None,
    "dict": {"user_message": "u", "assistant_response": "a"},
    "string": "u",
    "user-not-str": _turn(user_message=1),
    "user-none": _turn(user_message=None),
    "assistant-bytes": _turn(assistant_response=b"a"),
    "digest-dict": _turn(trajectory_digest={"tools_invoked": []}),
    "tools-non-str": _digest(tools_invoked=[1]),
    "tools-a-string": _digest(tools_invoked="search"),
    "tools-none": _digest(tools_invoked=None),
    "refs-a-string": _digest(artifacts_refs="ref"),
    "observations-none": _digest(observations_summary=None),
    "reasoning-int": _digest(reasoning_summary=3),
    "ts-nan": _turn(ts=math.nan),
    "ts-inf": _turn(ts=math.inf),
    "ts-str": _turn(ts="now"),
    "ts-bool": _turn(ts=True),
    "artifacts-object": _turn(artifacts_shown={"x": object()}),
    "artifacts-set": _turn(artifacts_shown={"x": {1, 2}}),
    "artifacts-nan": _turn(artifacts_shown={"x": math.nan}),
    "artifacts-a-list": _turn(artifacts_shown=[1, 2]),
    "artifacts-int-key": _turn(artifacts_shown={1: "x"}),
    "artifacts-nested-int-key": _turn(artifacts_shown={"x": {1: "y"}}),
    "artifacts-tuple": _turn(artifacts_shown={"x": (1, 2)}),
    "hidden-refs-a-string": _turn(artifacts_hidden_refs="ref"),
    "hidden-refs-non-str": _turn(artifacts_hidden_refs=[1]),
}


@pytest.mark.anyio
@pytest.mark.requirement("SER-001", "SER-002")
@pytest.mark.parametrize("strategy", ["truncation", "rolling_summary", "none"])
@pytest.mark.parametrize("kind", sorted(BAD_TURNS))
async def test_malformed_turn_raises_type_error_and_changes_nothing(
    kind: str, strategy: str
) -> None:
    """A turn is refused up front unless its state can be saved (SER-001) and loaded again
    (SER-002); a refused turn changes nothing and notifies nobody."""
    added: list[ConversationTurn] = []

    async def on_turn_added(turn: ConversationTurn) -> None:
        added.append(turn)

    config = rolling(full_zone_turns=1, on_turn_added=on_turn_added)
    config.strategy = strategy  # type: ignore[assignment]
    memory = DefaultShortTermMemory(config=config, summarizer=blocked_summarizer)
    await memory.add_turn(make_turn(0))
    await asyncio.sleep(0)
    before = (memory.to_dict(), await memory.get_llm_context(), memory.estimate_tokens())
    with pytest.raises(TypeError):
        await memory.add_turn(BAD_TURNS[kind])
    await asyncio.sleep(0)
    assert (memory.to_dict(), await memory.get_llm_context(), memory.estimate_tokens()) == before
    assert len(added) == (0 if strategy == "none" else 1)
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("SER-002")
async def test_accepted_turn_always_round_trips() -> None:
    """Every turn add_turn accepts can be saved and loaded again (SER-002)."""
    turn = ConversationTurn(
        user_message="u",
        assistant_response="a",
        trajectory_digest=TrajectoryDigest(("t1", "t2"), "o", None, ("ref",)),  # type: ignore[arg-type]
        artifacts_shown={"x": [1, 2.5, {"y": None, "z": True}], "é": "🐧"},
        artifacts_hidden_refs=("hidden",),  # type: ignore[arg-type]
        ts=7,
    )
    memory = DefaultShortTermMemory(config=rolling(), summarizer=blocked_summarizer)
    await memory.add_turn(turn)
    state = memory.to_dict()
    other = DefaultShortTermMemory(config=rolling(), summarizer=blocked_summarizer)
    other.from_dict(state)
    assert other.to_dict() == state
    assert await other.get_llm_context() == await memory.get_llm_context()
    await memory.aclose()
    await other.aclose()


@pytest.mark.requirement("SER-002")
def test_memory_can_be_built_and_loaded_outside_an_event_loop() -> None:
    memory = DefaultShortTermMemory(config=rolling(), summarizer=blocked_summarizer)
    memory.from_dict(memory.to_dict())
    assert memory.estimate_tokens() > 0


@pytest.mark.parametrize(
    ("summarizer", "error"),
    [(None, ValueError), ("gpt-4o-mini", TypeError), (42, TypeError)],
    ids=["missing", "a-model-name", "a-number"],
)
def test_a_summarizer_that_cannot_be_called_is_refused_at_construction(
    summarizer: Any, error: type[Exception]
) -> None:
    """Not left to show as RETRY at the first eviction."""
    with pytest.raises(error, match="summarizer"):
        DefaultShortTermMemory(config=rolling(), summarizer=summarizer)
