"""A correct backend that is only slow passes: checks judge order and counts, not speed.

A backend on a network store takes milliseconds per ``add_turn``. Checks that pace turns
against the memory's own timings (``degraded_retry_interval_s``, ``summarizer_timeout_s``)
must give a slow backend the same verdict as a fast one; these run such checks against the
reference with a delay before every ``add_turn``. A backend too slow for a check's time
limit is told so, and no requirement is judged.
"""

from __future__ import annotations

import textwrap

import pytest
from kit_support import (
    KIT_TESTS,
    ROOMY_TIMEOUT,
    RunPytest,
    assert_passed_everything,
    load_json,
)
from run_ahead import Ended, Job

#: The reference with ``$STM_TEST_ADD_TURN_DELAY_S`` seconds before every ``add_turn``.
SLOW_BACKEND = "--stm-backend=stm_restricted:slow_reference"


@pytest.mark.parametrize(
    ("delay", "check"),
    [
        # Eight turns at 40 ms or 100 ms each outlast the check's 0.2 s retry interval:
        # recovery attempts start while turns are still being added. It once blamed
        # HLT-005 on such a backend (dropped_turns=2, want 6): an early attempt succeeded.
        (0.04, "test_degraded_backlog_is_bounded_and_counted"),
        (0.1, "test_degraded_backlog_is_bounded_and_counted"),
        # Forty turns at 100 ms each while the check holds the first summarizer call: it
        # once blamed WM-003 on such a backend, the held call having timed out after 2 s.
        (0.1, "test_a_summary_over_many_pending_turns_hides_them_in_one_step"),
    ],
)
def test_checks_pacing_turns_against_the_memory_pass_a_slow_backend(
    run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch, delay: float, check: str
) -> None:
    monkeypatch.setenv("STM_TEST_ADD_TURN_DELAY_S", str(delay))
    result = run_pytest(SLOW_BACKEND, "-k", check, path=[str(KIT_TESTS)])
    result.assert_outcomes(passed=1)


SLOW_CHECKS = """
import anyio
import pytest

from stm_conformance.checks import config, turn


@pytest.mark.stm_requirement("SER-002")
async def test_slow_late(make_memory):
    memory = await make_memory(config("truncation"))
    await anyio.sleep(1.2)  # the check's earlier operations
    await memory.add_turn(turn(0))


@pytest.mark.stm_requirement("SER-002")
async def test_slow_from_the_start(make_memory):
    memory = await make_memory(config("truncation"))
    await memory.add_turn(turn(0))
"""


def test_a_check_out_of_time_in_a_slow_add_turn_is_not_concluded_unless_it_began_early(
    pytester: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # add_turn takes 30 s. Started with 0.6 s of the check's 1.8 s left, it is slow, as far
    # as the kit can tell: no requirement is judged. Started with all 1.8 s, it had half the
    # limit and more: it is stuck, and the check's requirement is blamed.
    monkeypatch.setenv("STM_TEST_ADD_TURN_DELAY_S", "30")
    pytester.makepyfile(test_slow=textwrap.dedent(SLOW_CHECKS))
    result = run_pytest(
        SLOW_BACKEND,
        "--stm-timeout=1.8",
        "--stm-report=r.json",
        "test_slow.py",
        path=[str(KIT_TESTS)],
    )
    result.assert_outcomes(failed=2)
    checks = {c["nodeid"].split("::")[-1]: c for c in load_json(pytester.path / "r.json")["checks"]}
    late, early = checks["test_slow_late"], checks["test_slow_from_the_start"]
    assert late["blamed"] is None and late["message"].startswith(
        "Failed: not concluded: check did not"
    )
    assert early["blamed"] == "SER-002" and "awaited forever" in early["message"]


#: The whole suite, as a backend author runs it, against the reference taking 40 ms more
#: for every add_turn (two minutes, nearly all of it asleep: started first, and not
#: counted among the runs that share the CPU), with a time limit it does not approach.
SLOWED = Job(
    "reference-slowed",
    "stm_restricted:slow_reference",
    ("--stm-hypothesis-profile=dev", "--stm-seed=20261123", "--tb=line", ROOMY_TIMEOUT),
    env=(("STM_TEST_ADD_TURN_DELAY_S", "0.04"),),
    idle=True,
    slow=True,
)


@pytest.mark.suite_run(SLOWED)
def test_the_whole_suite_passes_the_reference_slowed_by_40_ms_per_add_turn(
    suite_result: Ended,
) -> None:
    assert_passed_everything(suite_result.report, suite_result.output, "the slowed reference")
