"""The deadline machinery (``stm_conformance._deadline``) on its own, with short limits."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stm_conformance import _deadline
from stm_conformance._deadline import (
    AWAITED_FOREVER,
    BLOCKED,
    CHECK_LIMIT,
    NOT_CONCLUDED,
    CheckOutOfTime,
    CheckTimeout,
    check_deadline,
    close_runner,
    remaining,
    run_bounded,
    run_guarded,
)
from stm_conformance.scripted import ScriptedSummarizer


@pytest.fixture(autouse=True)
def _short_limits(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(_deadline, "BLOCK_THRESHOLD_S", 0.3)
    monkeypatch.setattr(_deadline, "CANCEL_GRACE_S", 0.1)
    monkeypatch.setattr(_deadline, "IGNORED_CANCEL_S", 0.3)
    monkeypatch.setattr(_deadline, "DEADLOCK_S", 0.2)
    yield


def _guarded(coro: Any, seconds: float | None = 5.0, **kwargs: Any) -> tuple[str, float]:
    """Run ``coro`` guarded on a fresh loop; the failure message and the time it took."""
    block_s = kwargs.pop("block_s", _deadline.BLOCK_THRESHOLD_S)
    started = time.monotonic()
    with pytest.raises(CheckTimeout) as caught:
        asyncio.run(run_guarded(coro, seconds=seconds, what="op", block_s=block_s, **kwargs))
    return str(caught.value), time.monotonic() - started


async def _swallowing_sleep() -> None:
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue


async def _spin() -> None:
    while True:  # blocks the event loop: no await
        pass


def test_result_and_exceptions_pass_through() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def boom() -> None:
        raise ValueError("boom")

    assert asyncio.run(run_guarded(answer(), seconds=1, what="op")) == 42
    with pytest.raises(ValueError, match="boom"):
        asyncio.run(run_guarded(boom(), seconds=1, what="op"))
    assert asyncio.run(run_guarded(answer(), seconds=None, what="op")) == 42


def test_awaiting_forever_fails_at_the_limit_with_the_task_stack() -> None:
    async def waits_on_nothing() -> None:
        await asyncio.Event().wait()

    message, took = _guarded(waits_on_nothing(), seconds=0.3, limit=" (--stm-timeout)")
    assert message.startswith(f"op did not finish within 0.3s (--stm-timeout): {AWAITED_FOREVER}")
    assert "in waits_on_nothing" in message and "await asyncio.Event().wait()" in message
    assert "abandoned" not in message
    assert took < 2


def test_a_task_that_ignores_cancellation_is_abandoned_and_the_loop_still_ends() -> None:
    message, took = _guarded(_swallowing_sleep(), seconds=0.3)
    assert AWAITED_FOREVER in message and "ignored cancellation and was abandoned" in message
    assert "in _swallowing_sleep" in message
    assert took < 2  # asyncio.run's shutdown did not wait for the abandoned task


def test_background_tasks_ignoring_cancellation_are_abandoned_too() -> None:
    async def closes_a_stubborn_worker() -> None:
        worker = asyncio.get_running_loop().create_task(_swallowing_sleep(), name="worker")
        await asyncio.sleep(0)
        worker.cancel()
        await asyncio.gather(worker)  # waits for the worker, which never ends

    message, took = _guarded(closes_a_stubborn_worker(), seconds=30)
    assert "(waiting on task 'worker', still running 0.3s after it was cancelled" in message
    assert "ignored cancellation and was abandoned" in message
    assert "awaiting task 'worker'" in message and "in _swallowing_sleep" in message
    assert took < 3


def test_tasks_an_operation_leaves_running_are_its_leftovers() -> None:
    made: list[str] = []

    def own_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        made.append(coro.__name__)  # a backend's factory keeps making the tasks
        return asyncio.Task(coro, loop=loop, **kwargs)

    async def leaves_a_worker() -> None:
        asyncio.get_running_loop().create_task(_swallowing_sleep(), name="worker")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(own_factory)
        try:
            await run_guarded(leaves_a_worker(), seconds=5, what="op")
            left = _deadline.leftover_tasks()
            assert [t.get_name() for t in left] == ["worker"]  # not the operation itself
            outside = loop.create_task(asyncio.sleep(3600), name="outside")  # no operation's
            await run_guarded(leaves_a_worker(), seconds=5, what="op")
            assert [t.get_name() for t in _deadline.leftover_tasks()] == ["worker"] * 2
            await _deadline.settle_tasks(_deadline.leftover_tasks())
            assert not _deadline.leftover_tasks() and not outside.done()
            # The guard wraps the operation's coroutine; the workers are the backend's.
            assert made.count("_swallowing_sleep") == 2 and "sleep" in made
        finally:
            await _deadline.settle_tasks()  # asyncio.run would wait for stubborn workers

    started = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - started < 2  # the stubborn workers were abandoned


def test_ignored_cancellation_is_decided_before_the_limit() -> None:
    async def times_itself_out() -> None:
        with anyio.fail_after(0.05):
            await _swallowing_sleep()

    message, took = _guarded(times_itself_out(), seconds=30)
    assert "after it was cancelled: the cancellation is ignored" in message
    assert took < 3


def test_a_blocked_loop_is_interrupted_with_the_blocking_stack() -> None:
    message, took = _guarded(_spin(), seconds=30)
    assert message.startswith(f"op {BLOCKED}")
    assert "in _spin" in message and "while True" in message
    assert took < 3


def test_a_blocking_c_call_is_interrupted() -> None:
    async def sleeps_in_c() -> None:
        time.sleep(60)  # noqa: ASYNC251 - the blocking call under test

    message, took = _guarded(sleeps_in_c(), seconds=30)
    assert BLOCKED in message and "time.sleep(60)" in message
    assert took < 3


def test_a_background_task_blocking_the_loop_fails_the_operation() -> None:
    async def waits_while_a_task_spins() -> None:
        spinner = asyncio.ensure_future(_spin())
        await asyncio.Event().wait()
        spinner.cancel()

    message, took = _guarded(waits_while_a_task_spins(), seconds=30)
    assert BLOCKED in message and "in _spin" in message
    assert took < 3


def test_a_hypothesis_run_of_the_check_itself_may_keep_the_loop() -> None:
    @settings(max_examples=6, deadline=None, database=None)
    @given(st.integers())
    def slow(n: int) -> None:
        time.sleep(0.1)

    async def runs_hypothesis() -> str:
        slow()
        return "done"

    started = time.monotonic()
    assert asyncio.run(run_guarded(runs_hypothesis(), seconds=10, what="op")) == "done"
    assert time.monotonic() - started > _deadline.BLOCK_THRESHOLD_S


def test_time_in_hypothesis_does_not_count_towards_a_later_block() -> None:
    # A hypothesis run just under the threshold, then synchronous kit code just under it:
    # together over the threshold, but the loop was never blocked by anything but kit code.
    @settings(max_examples=4, deadline=None, database=None)
    @given(st.integers())
    def slow(n: int) -> None:
        time.sleep(0.06)

    async def hypothesis_then_sync() -> str:
        slow()
        time.sleep(0.2)  # noqa: ASYNC251 - synchronous work after the run
        return "done"

    assert asyncio.run(run_guarded(hypothesis_then_sync(), seconds=10, what="op")) == "done"


def test_a_block_after_a_hypothesis_run_is_still_found() -> None:
    @settings(max_examples=2, deadline=None, database=None)
    @given(st.integers())
    def quick(n: int) -> None:
        pass

    async def hypothesis_then_spin() -> None:
        quick()
        await _spin()

    message, took = _guarded(hypothesis_then_spin(), seconds=30)
    assert BLOCKED in message and "in _spin" in message
    assert took < 3


def test_a_task_blocking_the_loop_after_an_operation_returned_fails_the_check() -> None:
    # The guarded operation returns, leaving a task behind that blocks the loop while the
    # check goes on with the loop's own work (no guard active): the check's deadline
    # watch interrupts the task and fails the check, long before the deadline itself.
    async def leaves_a_spinner() -> None:
        asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(_spin()))

    async def check() -> None:
        await run_guarded(leaves_a_spinner(), seconds=5, what="op")
        await asyncio.sleep(1.0)  # unguarded: the spinner blocks the loop meanwhile

    started = time.monotonic()
    with pytest.raises(CheckTimeout) as stopped, check_deadline(20):
        asyncio.run(check())
    assert time.monotonic() - started < 5
    message = str(stopped.value)
    assert BLOCKED in message and "between the check's operations" in message
    assert "in _spin" in message


def test_a_loop_off_the_main_thread_is_interrupted_too() -> None:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            asyncio.run(run_guarded(_spin(), seconds=30, what="op"))
        except CheckTimeout as exc:
            outcome["message"] = str(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "the blocked loop in a thread was not interrupted"
    assert BLOCKED in outcome["message"]


def test_waiting_on_a_held_summarizer_call_is_a_deadlock() -> None:
    summarizer = ScriptedSummarizer()
    summarizer.hold()

    async def awaits_the_summarizer() -> None:
        await summarizer({"previous_summary": "", "turns": []})

    message, took = _guarded(awaits_the_summarizer(), seconds=30, probe=_deadline.kit_probe)
    assert "waiting on a summarizer call the check holds" in message
    assert took < 3


class _Memory:
    def __init__(self, summarizer: ScriptedSummarizer | None) -> None:
        # As make_memory passes it: noting the tasks that call it.
        self.summarizer = None if summarizer is None else _deadline.noting_callers(summarizer)

    async def add_turn(self) -> None:
        async def work() -> None:
            if self.summarizer is not None:
                with contextlib.suppress(RuntimeError):
                    await self.summarizer({"previous_summary": "", "turns": []})
            await asyncio.sleep(3600)  # a retry backoff, say

        await asyncio.ensure_future(work())


def test_add_turn_waiting_on_a_task_that_called_the_summarizer_is_stuck() -> None:
    summarizer = ScriptedSummarizer()
    summarizer.fail_always("raise")
    memory = _Memory(summarizer)
    message, took = _guarded(memory.add_turn(), seconds=30, probe=_deadline.kit_probe)
    assert "waiting on the summarizer, from inside add_turn" in message
    assert "awaiting task" in message and "in work" in message
    assert took < 3


def test_add_turn_waiting_on_other_work_waits_for_the_limit() -> None:
    message, _ = _guarded(_Memory(None).add_turn(), seconds=0.5, probe=_deadline.kit_probe)
    assert message.startswith(f"op did not finish within 0.5s: {AWAITED_FOREVER}")


def test_a_guard_with_no_time_left_fails_at_once() -> None:
    async def never_run() -> None:
        raise AssertionError("ran")  # pragma: no cover

    with pytest.raises(CheckOutOfTime) as caught:
        asyncio.run(run_guarded(never_run(), seconds=0, what="op", limit=CHECK_LIMIT))
    assert str(caught.value).startswith(
        f"{NOT_CONCLUDED}: op: no time left before the check's deadline (--stm-timeout); "
    )
    # Another limit than the check's: a finding, as before.
    message, took = _guarded(never_run(), seconds=0, limit=" (a limit of the check's own)")
    assert message == "op: no time left before the check's deadline (a limit of the check's own)"
    assert took < 1


def _out_of_check_time(check_s: float, op_s: float) -> CheckTimeout:
    """What an operation waiting on nothing raises when the check's time ends it after
    ``op_s`` of a ``check_s`` limit."""

    async def op() -> None:
        await asyncio.Event().wait()

    async def check() -> None:
        await asyncio.sleep(check_s - op_s)  # the check's earlier operations
        await run_guarded(op(), seconds=remaining(), what="op", limit=CHECK_LIMIT)

    with check_deadline(check_s), pytest.raises(CheckTimeout) as caught:
        asyncio.run(check())
    return caught.value


def test_an_operation_started_late_in_a_check_that_runs_out_of_time_concludes_nothing() -> None:
    late = _out_of_check_time(1.0, 0.3)
    assert type(late) is CheckOutOfTime
    assert re.match(
        rf"{NOT_CONCLUDED}: op did not finish within 0\.[23]\d*s \(--stm-timeout\); "
        "nothing was found stuck, so no requirement is judged",
        str(late),
    ), str(late)
    assert "in op" in str(late), "the stack of where it waited"
    # Half the check's time or more in one operation: stuck there, a failure as before.
    stuck = _out_of_check_time(0.6, 0.45)
    assert type(stuck) is CheckTimeout
    assert f"(--stm-timeout): {AWAITED_FOREVER}" in str(stuck)


def test_check_deadline_bounds_guards_and_interrupts_synchronous_code() -> None:
    assert remaining() is None
    with check_deadline(0):
        assert remaining() is None
    started = time.monotonic()
    with (
        pytest.raises(CheckTimeout, match=r"check did not finish within 0.2s"),
        check_deadline(0.2),
    ):
        left = remaining()
        assert left is not None and 0 < left <= 0.2
        time.sleep(30)
    assert time.monotonic() - started < 3
    assert remaining() is None


def test_run_bounded_and_close_runner_survive_a_stubborn_backend() -> None:
    runner = asyncio.Runner()
    started = time.monotonic()
    try:

        async def leaves_a_stubborn_task() -> None:
            task = asyncio.ensure_future(_swallowing_sleep())
            await asyncio.sleep(0)
            assert not task.done()

        run_bounded(runner, leaves_a_stubborn_task(), seconds=5)
        with check_deadline(0.3), pytest.raises(CheckTimeout, match="awaited forever"):
            run_bounded(runner, _swallowing_sleep())
    finally:
        close_runner(runner)  # would wait forever for the stubborn task
    assert time.monotonic() - started < 4


# -- the check's own time ---------------------------------------------------------------

#: Code of a backend: compiled under a file of its own, in a module outside the kit.
_BACKEND: dict[str, Any] = {"__name__": "slow_backend"}
exec(
    compile(
        "import asyncio, time\n"
        "async def waits():\n"
        "    await asyncio.Event().wait()\n"
        "def blocks(seconds):\n"
        "    time.sleep(seconds)\n"
        "def calls(function):\n"
        "    return function()\n",
        "/backend/slow_backend.py",
        "exec",
    ),
    _BACKEND,
)


def _stopped_check(body: Any, seconds: float = 0.6) -> CheckTimeout:
    """How a check whose code is this file's, guarded as the plugin guards it, ends when
    ``body()`` outlasts its limit of ``seconds``."""

    async def check() -> None:
        await run_guarded(
            body(), seconds=seconds, what="check", probe=_deadline.kit_probe, limit=CHECK_LIMIT
        )

    with check_deadline(seconds, "test_x.py::test_x", __file__), pytest.raises(CheckTimeout) as e:
        asyncio.run(check())
    return e.value


def test_the_kit_and_the_check_are_told_apart_from_the_backend() -> None:
    here = sys._getframe()
    assert not _deadline._kit_side(here), "a file that is not the running check's: a backend's"
    with check_deadline(5, "test_x.py::test_x", __file__):
        assert _deadline._kit_side(sys._getframe())
    frames: dict[str, Any] = {}

    def look() -> None:
        frames["outer"] = _deadline._backend_call(sys._getframe())

    def nested() -> Any:
        return _deadline._backend_call(sys._getframe())

    with check_deadline(5, "test_x.py::test_x", __file__):
        assert nested() is None  # the check's own frames, out to where the check started
        _BACKEND["calls"](look)  # the backend calls back into the check's code
    outer = frames["outer"]
    assert outer is not None and outer.f_code.co_name == "calls"
    sleeping = asyncio.sleep(0)
    try:
        assert _deadline._kit_side(sleeping.cr_frame)  # the standard library's
    finally:
        sleeping.close()


def test_a_check_waiting_on_its_own_code_at_its_limit_concludes_nothing() -> None:
    async def polls() -> None:  # a check polling the memory, say, with nothing in flight
        for _ in range(10_000):
            await asyncio.sleep(0.01)

    stopped = _stopped_check(polls)
    assert type(stopped) is CheckOutOfTime, str(stopped)
    assert str(stopped).startswith(f"{NOT_CONCLUDED}: check did not finish within 0.6s")
    # Waiting on the backend's code at the limit: awaited forever, a finding as before.
    stuck = _stopped_check(_BACKEND["waits"])
    assert type(stuck) is CheckTimeout
    assert f"(--stm-timeout): {AWAITED_FOREVER}" in str(stuck) and "in waits" in str(stuck)


def _hypothesis_run(call_s: float) -> Any:
    """A check that runs a hypothesis test in the loop, each example one backend call of
    ``call_s`` seconds, for longer than its limit."""

    @settings(max_examples=10_000, deadline=None, database=None)
    @given(st.integers())
    def example(n: int) -> None:
        _BACKEND["blocks"](call_s)

    async def check() -> None:
        example()

    return check


def test_a_hypothesis_run_of_the_check_past_its_limit_concludes_nothing() -> None:
    stopped = _stopped_check(_hypothesis_run(0.02))
    assert type(stopped) is CheckOutOfTime, str(stopped)
    assert str(stopped).startswith(
        f"{NOT_CONCLUDED}: check did not finish within 0.6s (--stm-timeout) (its own "
        "hypothesis run held the event loop: no call of the backend in it ran for 0.3s)"
    )


def test_one_backend_call_in_a_hypothesis_run_past_the_limit_blocked_the_loop() -> None:
    started = time.monotonic()
    stopped = _stopped_check(_hypothesis_run(30))
    assert type(stopped) is CheckTimeout, str(stopped)
    assert str(stopped).startswith(f"check {BLOCKED}") and "in blocks" in str(stopped)
    assert time.monotonic() - started < 5


def test_synchronous_code_of_the_check_past_its_hard_deadline_concludes_nothing() -> None:
    with (
        pytest.raises(CheckOutOfTime, match=rf"^{NOT_CONCLUDED}: check did not finish within"),
        check_deadline(0.2, "test_x.py::test_x", __file__),
    ):
        time.sleep(30)  # this file is the check's: its own code
    # The backend's code there is stopped as before (a finding).
    with pytest.raises(CheckTimeout) as stopped, check_deadline(0.2, "test_x.py::test_x", __file__):
        _BACKEND["blocks"](30)
    assert type(stopped.value) is CheckTimeout and "in blocks" in str(stopped.value)


def test_a_stall_is_the_process_not_scheduled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_deadline, "_STALLS", collections.deque(maxlen=8))
    _deadline._note_stall(10.0, 10.03, 0.0)  # a timer's ordinary lateness
    _deadline._note_stall(20.0, 20.5, 0.4)  # late, but busy: a thread kept the GIL
    _deadline._note_stall(30.0, 30.5, 0.0)  # late and idle: not scheduled
    _deadline._note_stall(40.0, 40.5, 0.1)  # not scheduled but for 0.1 s of CPU
    assert list(_deadline._STALLS) == [(30.0, 30.5), (40.1, 40.5)]
    assert _deadline.stalled_s(0, 100) == pytest.approx(0.9)
    assert _deadline.stalled_s(30.2, 31) == pytest.approx(0.3)
    assert _deadline.stalled_s(29, 30) == 0
