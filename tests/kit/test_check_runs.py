"""How checks run: capability skips, fixtures, deadlines, failure messages, JUnit."""

from __future__ import annotations

import gc
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from kit_support import RunPytest, load_json, validate_report

FakeSuite = Callable[[str], Path]
BACKEND = "--stm-backend=fakeprov:provider"


def test_capability_skips_and_fixture_lifecycle(
    fake_suite: FakeSuite, run_pytest: RunPytest
) -> None:
    fake_suite(
        """
        import fakeprov
        from reference_impl import MemoryKey
        from stm_conformance.checks import config, turn


        @req("CON-002")
        @cap("shared_state")
        def test_needs_shared_state():
            raise AssertionError("must not run")


        @req("STR-002")
        @cap("truncation")
        async def test_makes_two(make_memory, stm_capabilities):
            assert stm_capabilities == frozenset({"truncation", "rolling_summary"})
            a = await make_memory(config("truncation"))
            b = await make_memory(config("rolling_summary"), key=MemoryKey("t", "u", "s"))
            await b.add_turn(turn(1))
            assert a.key != b.key and b.key == MemoryKey("t", "u", "s")
            assert fakeprov.closed == []


        @req("STR-001")
        def test_both_were_closed_through_the_provider():
            assert len(fakeprov.closed) == 2


        @req("CON-002")
        async def test_no_peer_factory_skips(make_peer):
            raise AssertionError("must not run")
        """
    )
    result = run_pytest(BACKEND, "-rs", "test_fake.py")
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines_random(
        [
            "SKIPPED*test_fake.py:*: backend does not declare capability 'shared_state'",
            "SKIPPED*backend provides no create_peer*",
        ]
    )


def test_slow_check_fails_at_the_deadline(fake_suite: FakeSuite, run_pytest: RunPytest) -> None:
    fake_suite(
        """
        import anyio


        @req("WM-001")
        async def test_hangs():
            await anyio.sleep(30)
        """
    )
    result = run_pytest(BACKEND, "--stm-timeout=0.2", "test_fake.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*check did not finish within 0.2s (--stm-timeout)*"])


def test_a_check_out_of_time_in_its_own_code_blames_nothing(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    # At the time limit the first two checks run their own code (a hypothesis run whose
    # every backend call is short; a poll's sleep): a busy machine, or a slow backend
    # over many calls, not a finding. The other two are in the backend's code then: one
    # call blocking the loop, one wait that never ends.
    pytester.makepyfile(
        backend_part="""
        import asyncio
        import time


        def pause(seconds):
            time.sleep(seconds)


        async def forever():
            await asyncio.Event().wait()
        """
    )
    fake_suite(
        """
        import anyio
        import backend_part
        from hypothesis import given, settings, strategies as st


        def run_examples(seconds):
            @settings(max_examples=100_000, deadline=None, database=None)
            @given(st.integers())
            def example(n):
                backend_part.pause(seconds)

            example()


        @req("SER-003")
        async def test_own_hypothesis_run():
            run_examples(0.01)


        @req("WM-002")
        async def test_own_poll():
            for _ in range(1000):
                await anyio.sleep(0.01)


        @req("STR-001")
        async def test_one_backend_call_blocks():
            run_examples(30)


        @req("BUD-001")
        async def test_waits_on_the_backend():
            await backend_part.forever()
        """
    )
    result = run_pytest(BACKEND, "--stm-timeout=1", "--stm-report=r.json", "test_fake.py")
    result.assert_outcomes(failed=4)
    report = load_json(pytester.path / "r.json")
    validate_report(report)
    checks = {c["nodeid"].split("::")[-1]: c for c in report["checks"]}
    assert {name: c["blamed"] for name, c in checks.items()} == {
        "test_own_hypothesis_run": None,
        "test_own_poll": None,
        "test_one_backend_call_blocks": "STR-001",
        "test_waits_on_the_backend": "BUD-001",
    }
    assert checks["test_own_hypothesis_run"]["message"].startswith(
        "Failed: not concluded: check did not finish within 1s (--stm-timeout) (its own "
        "hypothesis run held the event loop"
    )
    assert "blocked the event loop" in checks["test_one_backend_call_blocks"]["message"]
    assert "awaited forever" in checks["test_waits_on_the_backend"]["message"]
    statuses = {rid: r["status"] for rid, r in report["requirements"].items()}
    assert statuses["SER-003"] == statuses["WM-002"] == "inconclusive"


def test_a_bound_missed_while_the_process_was_stopped_is_not_concluded(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    # The process is stopped (SIGSTOP, then SIGCONT from outside) for most of the time
    # measured: a bound missed by less than that is the machine's. The same lateness of
    # the process's own is a finding.
    fake_suite(
        """
        import asyncio
        import os
        import signal
        import subprocess
        import time

        from stm_conformance.checks import assert_not_late


        @req("HLT-002")
        async def test_late_while_stopped():
            started = time.monotonic()
            subprocess.Popen(["sh", "-c", f"sleep 0.8; kill -CONT {os.getpid()}"])
            await asyncio.sleep(0.05)
            os.kill(os.getpid(), signal.SIGSTOP)  # about 0.75 s
            ended = time.monotonic()
            assert_not_late(ended - started - 0.3, started, ended, "HLT-002: it came late")


        @req("HLT-002")
        async def test_late_by_itself():
            started = time.monotonic()
            await asyncio.sleep(0.8)
            ended = time.monotonic()
            assert_not_late(ended - started - 0.3, started, ended, "HLT-002: it came late")
        """
    )
    result = run_pytest(BACKEND, "--stm-report=r.json", "test_fake.py")
    result.assert_outcomes(failed=2)
    report = load_json(pytester.path / "r.json")
    checks = {c["nodeid"].split("::")[-1]: c for c in report["checks"]}
    assert {name: c["blamed"] for name, c in checks.items()} == {
        "test_late_while_stopped": None,
        "test_late_by_itself": "HLT-002",
    }
    assert re.search(
        r"not concluded: HLT-002: it came late: 0\.\d+s past its bound, while the process "
        r"was not scheduled at all for 0\.\d+s",
        checks["test_late_while_stopped"]["message"],
    ), checks["test_late_while_stopped"]["message"]


def test_the_kit_s_waits_on_the_backend_count_only_time_the_process_was_scheduled(
    fake_suite: FakeSuite, run_pytest: RunPytest
) -> None:
    # An operation that needs 1 s of the loop, under a limit of 1.2 s (a check's wait, a
    # guard's): met, though the process is stopped for 1 s meanwhile (SIGSTOP from outside,
    # then SIGCONT); one that needs 1.5 s misses it.
    fake_suite(
        """
        import asyncio
        import os
        import subprocess

        from stm_conformance._deadline import run_guarded
        from stm_conformance.checks import eventually, returns_within


        async def operation(steps):
            for _ in range(steps):
                await asyncio.sleep(0.05)


        def stop_for_a_second():
            pid = os.getpid()
            stop = f"sleep 0.3; kill -STOP {pid}; sleep 1; kill -CONT {pid}"
            subprocess.Popen(["sh", "-c", stop])


        @req("WM-001")
        async def test_returns_within_while_stopped():
            stop_for_a_second()
            await returns_within(operation(20), timeout=1.2, what="WM-001: it did not return")


        @req("WM-001")
        async def test_eventually_while_stopped():
            stop_for_a_second()
            task = asyncio.ensure_future(operation(20))
            await eventually(task.done, timeout=1.2, what="WM-001: it did not end")


        @req("WM-001")
        async def test_a_guard_while_stopped():  # a step of the differential, say
            stop_for_a_second()
            await run_guarded(operation(20), seconds=1.2, what="the step")


        @req("WM-001")
        async def test_returns_within_too_slow():
            await returns_within(operation(30), timeout=1.2, what="WM-001: it did not return")


        @req("WM-001")
        async def test_a_guard_too_slow():
            await run_guarded(operation(30), seconds=1.2, what="the step")
        """
    )
    result = run_pytest(BACKEND, "-rf", "test_fake.py")
    result.stdout.fnmatch_lines_random(
        [
            "FAILED test_fake.py::test_returns_within_too_slow - WM-001*",
            "FAILED test_fake.py::test_a_guard_too_slow - WM-001*",
        ]
    )
    result.assert_outcomes(passed=3, failed=2)
    output = result.stdout.str()
    assert "AssertionError: WM-001: it did not return (did not return within 1.2s)" in output
    assert "the step did not finish within 1.2s: awaited forever" in output


def test_failure_starts_with_requirement_and_junit_carries_ids(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    fake_suite(
        """
        @req("WM-003", "WM-004")
        @cap("rolling_summary")
        def test_fails():
            assert 1 == 2, "boom"


        @req("WM-003", "WM-004")
        def test_fails_naming_its_second():
            raise AssertionError("WM-004: delivered twice")


        @req("WM-003")
        def test_fails_naming_another():
            raise AssertionError("CB-001: reported twice")
        """
    )
    result = run_pytest(BACKEND, "--junitxml=junit.xml", "test_fake.py")
    result.assert_outcomes(failed=3)
    # Headed by the requirement blamed (the first when the message names none), alone.
    result.stdout.fnmatch_lines(
        [
            "*_ test_fails _*",
            "",
            "WM-003 Installing a summary MUST remove from pending exactly the turns sent*",
            "",
            "*def test_fails():*",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*_ test_fails_naming_its_second _*", "", "WM-004 Each turn MUST be delivered*", ""]
    )
    result.stdout.fnmatch_lines(["*_ test_fails_naming_another _*", "", "CB-001 *", ""])
    case = ET.parse(pytester.path / "junit.xml").getroot().find(".//testcase[@name='test_fails']")
    assert case is not None
    properties = [(p.get("name"), p.get("value")) for p in case.iter("property")]
    assert properties == [
        ("stm_requirement", "WM-003"),
        ("stm_requirement", "WM-004"),
        ("stm_capability", "rolling_summary"),
    ]
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message", "").startswith("WM-003 Installing a summary MUST remove")
    assert "boom" in failure.get("message", "")


def test_invalid_markers_fail_the_check(fake_suite: FakeSuite, run_pytest: RunPytest) -> None:
    fake_suite(
        """
        @req("ZZZ-999")
        def test_unknown_id():
            pass


        @req("STR-001")
        @cap("teleport")
        def test_unknown_capability():
            pass
        """
    )
    result = run_pytest(BACKEND, "test_fake.py")
    result.assert_outcomes(errors=2)
    output = result.stdout.str()
    assert "conformance check names requirement IDs not in the spec: ['ZZZ-999']" in output
    assert "conformance check names unknown capabilities: ['teleport']" in output


def test_a_precondition_broken_in_concurrent_calls_fails_its_check_alone(
    fake_suite: FakeSuite, run_pytest: RunPytest
) -> None:
    """A broken precondition ends a check at once; raised in one of the calls a check runs
    at once (``checks.concurrently``), it ends the check as itself, blamed on its own
    requirement, and the async checks after it run."""
    fake_suite(
        """
        import anyio
        from stm_conformance.checks import concurrently
        from stm_conformance.fixtures import PreconditionError


        @req("CON-001")
        async def test_one_call_breaks_a_precondition():
            async def fine():
                await anyio.sleep(0.01)

            async def broken():
                raise PreconditionError("HLT-008: add_turn() raised RuntimeError")

            await concurrently(fine, broken, fine)


        @req("STR-001")
        async def test_the_next_async_check_runs(make_memory):
            from stm_conformance.checks import config, turn

            memory = await make_memory(config("truncation"))
            await memory.add_turn(turn(1))
        """
    )
    result = run_pytest(BACKEND, "--stm-report=report.json", "test_fake.py")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*HLT-008: add_turn() raised RuntimeError*"])
    result.stdout.no_fnmatch_line("*ClosedResourceError*")
    result.stdout.no_fnmatch_line("*BaseExceptionGroup*")


def test_a_run_freezes_what_it_collected_and_unfreezes_it_at_the_end(
    fake_suite: FakeSuite, pytester: pytest.Pytester
) -> None:
    """A check's full collections do not walk what collection made (one runs before each
    failure's report); a process that runs pytest again and again frees each run's items."""
    assert gc.get_freeze_count() == 0
    fake_suite(
        """
        import gc


        @req("STR-001")
        def test_collected_objects_are_frozen():
            assert gc.get_freeze_count() > 0
        """
    )
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess(BACKEND, "test_fake.py")
    result.assert_outcomes(passed=1)
    assert gc.get_freeze_count() == 0


def test_a_task_any_memory_method_started_that_raises_after_aclose_is_con003s(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    # Not only add_turn and flush: a task that get_llm_context (or afrom_dict, persist ...)
    # started, raising unretrieved once the memory was closed, is the memory's leftover.
    # One raising while the memory is open is the check's own failure.
    fake_suite(
        """
        import asyncio
        import gc

        from stm_conformance.checks import config


        def leaky(memory, after):
            view = memory._stm_memory.get_llm_context

            async def get_llm_context():
                async def boom():
                    await asyncio.sleep(after)
                    raise RuntimeError("from the memory's own task")

                asyncio.get_running_loop().create_task(boom())
                return await view()

            memory._stm_memory.get_llm_context = get_llm_context


        @req("STR-001")
        async def test_raises_after_aclose(make_memory):
            memory = await make_memory(config("rolling_summary"))
            leaky(memory, 0.1)
            await memory.get_llm_context()
            await memory.aclose()
            await asyncio.sleep(0.3)
            gc.collect()


        @req("STR-002")
        async def test_raises_while_open(make_memory):
            memory = await make_memory(config("rolling_summary"))
            leaky(memory, 0)
            await memory.get_llm_context()
            await asyncio.sleep(0.2)
            gc.collect()
        """
    )
    result = run_pytest(BACKEND, "--stm-report=r.json", "test_fake.py")
    result.assert_outcomes(failed=2)
    report = load_json(pytester.path / "r.json")
    checks = {c["nodeid"].split("::")[-1]: c for c in report["checks"]}
    assert {name: c["blamed"] for name, c in checks.items()} == {
        "test_raises_after_aclose": "CON-003",
        "test_raises_while_open": "STR-002",
    }
    message = checks["test_raises_after_aclose"]["message"]
    assert "by an operation of a memory this check closed" in message


def test_a_task_that_raises_after_its_check_is_blamed_on_con003_not_on_the_check_then_running(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    # A task started in one check raises, unretrieved, during the next: that check is not
    # what broke (it was blamed on BUD-001 here). A task that raises within its own check
    # still fails that check, on that check's requirement.
    fake_suite(
        """
        import asyncio
        import gc


        async def boom(after):
            await asyncio.sleep(after)
            raise RuntimeError("from a leftover task")


        @req("CB-001")
        async def test_leaves_a_task():
            asyncio.get_running_loop().create_task(boom(0.1))


        @req("BUD-001")
        async def test_runs_meanwhile():
            await asyncio.sleep(0.5)
            gc.collect()


        @req("STR-001")
        async def test_raises_in_its_own_task():
            asyncio.get_running_loop().create_task(boom(0))
            await asyncio.sleep(0.2)
            gc.collect()
        """
    )
    result = run_pytest(BACKEND, "--stm-report=r.json", "test_fake.py")
    result.assert_outcomes(passed=1, failed=2)
    report = load_json(pytester.path / "r.json")
    validate_report(report)
    checks = {c["nodeid"].split("::")[-1]: c for c in report["checks"]}
    blamed = {name: c["blamed"] for name, c in checks.items()}
    assert blamed == {
        "test_leaves_a_task": None,
        "test_runs_meanwhile": "CON-003",
        "test_raises_in_its_own_task": "STR-001",
    }
    message = checks["test_runs_meanwhile"]["message"]
    assert "started during test_fake.py::test_leaves_a_task, was still running" in message
    assert "RuntimeError('from a leftover task')" in message
    statuses = {rid: r["status"] for rid, r in report["requirements"].items()}
    assert statuses["CON-003"] == "fail" and statuses["BUD-001"] == "inconclusive"
    assert statuses["CB-001"] == "pass"


def test_a_check_out_of_its_time_with_nothing_stuck_blames_no_requirement(
    fake_suite: FakeSuite, run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    # A step that starts with a third of the check's time left and is only slow (a timer,
    # not a wait on something only the caller could end): the run fails, but the check
    # says nothing of WM-002 or WM-001; a check that did conclude still fails its own.
    fake_suite(
        """
        import asyncio
        import time

        from stm_conformance._deadline import close_runner, run_bounded


        @req("WM-002")
        @req("WM-001")
        def test_runs_out_of_time():
            runner = asyncio.Runner()
            try:
                time.sleep(1.0)  # the check's earlier steps
                run_bounded(runner, asyncio.sleep(30), what="a slow step")
            finally:
                close_runner(runner)


        @req("BUD-001")
        def test_concludes():
            raise AssertionError("BUD-001: over the limit")
        """
    )
    result = run_pytest(BACKEND, "--stm-timeout=1.5", "--stm-report=r.json", "test_fake.py")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["*not concluded: a slow step did not finish within 0.*s (--stm-timeout); nothing*"]
    )
    report = load_json(pytester.path / "r.json")
    validate_report(report)
    blamed = {c["nodeid"].split("::")[-1]: c["blamed"] for c in report["checks"]}
    assert blamed == {"test_runs_out_of_time": None, "test_concludes": "BUD-001"}
    statuses = {rid: r["status"] for rid, r in report["requirements"].items()}
    assert statuses["WM-001"] == statuses["WM-002"] == "inconclusive"
    assert statuses["BUD-001"] == "fail"
