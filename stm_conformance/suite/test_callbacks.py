"""CB — callbacks run once per event, in order, and can never harm the memory."""

from __future__ import annotations

import pytest

from stm_conformance import RecordingCallbacks
from stm_conformance.checks import (
    EITHER_STRATEGY,
    config,
    eventually,
    memory_view,
    returns_within,
    turn,
)

pytestmark = [pytest.mark.stm_capability("callbacks")]
req = pytest.mark.stm_requirement


@req("CB-001")
@pytest.mark.parametrize("strategy", EITHER_STRATEGY)
async def test_turn_added_once_per_turn_in_order(make_memory, recording_callbacks, strategy):
    cfg = config(strategy, full_zone_turns=2, **recording_callbacks.config_kwargs())
    memory = await make_memory(cfg)
    for i in range(5):
        await memory.add_turn(turn(i))
    await memory.flush()
    await recording_callbacks.wait_for("turns", 5)
    await recording_callbacks.settle()
    assert [t.user_message for t in recording_callbacks.turns] == [f"u{i}" for i in range(5)]


@req("CB-001")
async def test_no_turn_callback_under_strategy_none(make_memory, recording_callbacks):
    """``on_turn_added`` runs once per *stored* turn; strategy ``none`` stores none."""
    memory = await make_memory(config("none", **recording_callbacks.config_kwargs()))
    for i in range(3):
        await memory.add_turn(turn(i))
    await recording_callbacks.settle()
    assert recording_callbacks.turns == [], (
        f"CB-001: on_turn_added ran {len(recording_callbacks.turns)} time(s) under strategy "
        "none, which stores no turn (STR-001)"
    )


@req("CB-002")
@pytest.mark.stm_capability("rolling_summary")
async def test_summary_updated_once_per_summary(
    make_memory, scripted_summarizer, recording_callbacks
):
    cfg = config(full_zone_turns=1, **recording_callbacks.config_kwargs())
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    for i in range(5):
        if i == 2:  # a failed call (then its retry succeeds) installs nothing: no callback
            scripted_summarizer.fail_next(1, mode="raise")
        await memory.add_turn(turn(i))
        await memory.flush()
    assert len(scripted_summarizer.calls) > scripted_summarizer.completed, "no call failed"
    await recording_callbacks.wait_for("summaries", scripted_summarizer.completed)
    await recording_callbacks.settle()
    reported, installed = len(recording_callbacks.summaries), scripted_summarizer.completed
    assert reported == installed, (
        f"on_summary_updated ran {reported} times for {installed} installed summaries "
        f"({len(scripted_summarizer.calls) - installed} failed calls installed nothing)"
    )
    olds = [old for old, _ in recording_callbacks.summaries]
    news = [new for _, new in recording_callbacks.summaries]
    assert olds == ["", *news[:-1]], "old/new must chain"
    assert news[-1] == (await memory_view(memory))["summary"]


@req("CB-003")
@pytest.mark.stm_capability("rolling_summary")
async def test_health_changes_once_each_in_order(
    make_memory, scripted_summarizer, recording_callbacks
):
    cfg = config(full_zone_turns=1, retry_attempts=2, **recording_callbacks.config_kwargs())
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_always("raise")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await eventually(
        lambda: memory.health.value == "degraded",
        what="HLT-004: DEGRADED once every attempt failed (precondition)",
    )
    await recording_callbacks.wait_for("health", 2)
    await recording_callbacks.settle()
    assert recording_callbacks.health == [("healthy", "retry"), ("retry", "degraded")], (
        "RETRY -> RETRY is not a transition; each transition is reported once, in order"
    )


@req("CB-004")
@pytest.mark.stm_capability("truncation")
async def test_slow_or_raising_callbacks_never_harm_memory(make_memory):
    slow = RecordingCallbacks(delay_s=30.0)
    cfg = config("truncation", full_zone_turns=2, **slow.config_kwargs())
    memory = await make_memory(cfg)

    async def three_turns() -> None:
        for i in range(3):
            await memory.add_turn(turn(i))

    await returns_within(
        three_turns(), timeout=1, what="CB-004: three add_turn calls while callbacks take 30s"
    )
    raising = RecordingCallbacks(raise_errors=True)
    cfg = config("truncation", full_zone_turns=2, **raising.config_kwargs())
    memory = await make_memory(cfg)
    for i in range(3):
        await memory.add_turn(turn(i))
    await raising.wait_for("turns", 3)
    await raising.settle()
    assert len((await memory_view(memory))["recent_turns"]) == 2
