"""The scripted summarizer and recording callbacks behave as checks rely on."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from stm_conformance import RecordingCallbacks, ScriptedSummarizer
from stm_conformance.scripted import FailureMode

pytestmark = pytest.mark.anyio

PAYLOAD = {"previous_summary": "old", "turns": [{"user": "u1", "assistant": "a1"}, {"user": "u2"}]}


async def test_success_appends_one_line_per_turn_and_records_copies() -> None:
    summarizer = ScriptedSummarizer()
    payload = {"previous_summary": "", "turns": [{"user": "u1", "assistant": "a1"}]}
    assert await summarizer(payload) == {"summary": "user:u1"}
    payload["turns"].append({"user": "mutated"})
    assert await summarizer(PAYLOAD) == {"summary": "old\nuser:u1\nuser:u2"}
    assert summarizer.calls[0] == {
        "previous_summary": "",
        "turns": [{"user": "u1", "assistant": "a1"}],
    }
    assert summarizer.completed == 2
    assert summarizer.outputs == ["user:u1", "old\nuser:u1\nuser:u2"]
    assert len(summarizer.call_times) == 2
    assert summarizer.call_times[0] <= summarizer.call_times[1]


async def test_summary_keeps_its_last_max_chars() -> None:
    summarizer = ScriptedSummarizer(max_chars=8)
    assert await summarizer(PAYLOAD) == {"summary": "\nuser:u2"}


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("not_mapping", ["not", "a", "mapping"]),
        ("no_summary", {"text": "a reply without a summary key"}),
        ("non_string", {"summary": 123}),
        ("oversize", {"summary": "x" * 50}),
    ],
)
async def test_failure_modes_return_invalid_output(mode: FailureMode, expected: object) -> None:
    summarizer = ScriptedSummarizer(oversize_chars=50)
    summarizer.fail_next(1, mode)
    assert await summarizer(PAYLOAD) == expected
    assert await summarizer(PAYLOAD) == {"summary": "old\nuser:u1\nuser:u2"}
    assert summarizer.completed == 1
    assert summarizer.outputs[0] is None


async def test_attribute_mode_returns_an_object_that_is_not_a_mapping() -> None:
    summarizer = ScriptedSummarizer()
    summarizer.fail_next(1, "attribute")
    reply = await summarizer(PAYLOAD)
    assert not isinstance(reply, dict) and reply.summary == "old\nuser:u1\nuser:u2"
    assert summarizer.completed == 0 and summarizer.outputs == [None]


async def test_ended_follows_each_call() -> None:
    summarizer = ScriptedSummarizer()
    summarizer.hold()
    async with anyio.create_task_group() as tg:
        tg.start_soon(summarizer, PAYLOAD)
        await summarizer.wait_for_calls(1)
        assert summarizer.ended == [False]
        summarizer.release()
    summarizer.fail_next(1)
    with pytest.raises(RuntimeError):
        await summarizer(PAYLOAD)
    assert summarizer.ended == [True, True]


async def test_failed_counts_calls_without_a_summary_and_hanging_ones() -> None:
    summarizer = ScriptedSummarizer()
    assert summarizer.failed == 0
    await summarizer(PAYLOAD)
    assert summarizer.failed == 0, "a summary is no failure"
    summarizer.fail_next(1, "not_mapping")
    await summarizer(PAYLOAD)  # invalid output, returned: the memory's failure to judge
    assert summarizer.failed == 1
    summarizer.fail_always("hang")
    async with anyio.create_task_group() as tg:
        tg.start_soon(summarizer, PAYLOAD)
        await summarizer.wait_for_calls(3)
        await anyio.lowlevel.checkpoint()
        assert summarizer.failed == 2, "a call hanging now counts"
        tg.cancel_scope.cancel()
    assert summarizer.failed == 2, "a cancelled call ended without a summary"
    held = ScriptedSummarizer()
    held.hold()
    async with anyio.create_task_group() as tg:
        tg.start_soon(held, PAYLOAD)
        await held.wait_for_calls(1)
        assert held.failed == 0, "a held call has not failed"
        held.release()
    assert held.failed == 0


async def test_raise_hang_always_and_succeed() -> None:
    summarizer = ScriptedSummarizer()
    summarizer.fail_next(2)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            await summarizer(PAYLOAD)
    summarizer.fail_always("hang")
    with anyio.move_on_after(0.05) as scope:
        await summarizer(PAYLOAD)
    assert scope.cancelled_caught
    summarizer.succeed()
    assert "summary" in await summarizer(PAYLOAD)
    assert (len(summarizer.calls), summarizer.completed) == (4, 1)
    with pytest.raises(ValueError, match="unknown failure mode"):
        summarizer.fail_next(1, "explode")  # type: ignore[arg-type]


async def test_hold_blocks_after_recording_until_release() -> None:
    summarizer = ScriptedSummarizer()
    summarizer.hold()
    results: list[object] = []

    async def call() -> None:
        results.append(await summarizer(PAYLOAD))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        tg.start_soon(call)
        await summarizer.wait_for_calls(2)
        await anyio.sleep(0.01)
        assert results == [] and len(summarizer.calls) == 2
        summarizer.release()
    assert len(results) == 2


async def test_fail_next_applies_to_calls_that_start_later() -> None:
    summarizer = ScriptedSummarizer()
    summarizer.hold()
    async with anyio.create_task_group() as tg:
        tg.start_soon(summarizer, PAYLOAD)
        await summarizer.wait_for_calls(1)
        summarizer.fail_next(1)
        summarizer.release()
    assert summarizer.completed == 1
    with pytest.raises(RuntimeError):
        await summarizer(PAYLOAD)


async def test_wait_for_calls_times_out_clearly() -> None:
    with pytest.raises(TimeoutError, match=r"called 0 time.* within 0\.01s; the check waited"):
        await ScriptedSummarizer().wait_for_calls(1, timeout=0.01)


async def test_recording_callbacks_record_values_and_can_be_awaited() -> None:
    callbacks = RecordingCallbacks()
    kwargs = callbacks.config_kwargs()
    assert set(kwargs) == {"on_turn_added", "on_summary_updated", "on_health_changed"}
    from reference_impl import MemoryHealth

    async with anyio.create_task_group() as tg:
        tg.start_soon(callbacks.wait_for, "health", 1)
        await kwargs["on_turn_added"]("turn")
        await kwargs["on_summary_updated"]("", "s1")
        await kwargs["on_health_changed"](MemoryHealth.HEALTHY, MemoryHealth.RETRY)
    await callbacks.settle(quiet_s=0.01)
    assert callbacks.turns == ["turn"]
    assert callbacks.summaries == [("", "s1")]
    assert callbacks.health == [("healthy", "retry")]
    with pytest.raises(TimeoutError, match=r"recorded 1 turns within 0\.01s"):
        await callbacks.wait_for("turns", 2, timeout=0.01)


async def test_recording_callbacks_delay_and_raise_after_recording() -> None:
    callbacks = RecordingCallbacks(delay_s=0.02, raise_errors=True)
    start = anyio.current_time()
    with pytest.raises(RuntimeError, match="on purpose"):
        await callbacks.on_turn_added("t")
    assert anyio.current_time() - start >= 0.015
    assert callbacks.turns == ["t"]
