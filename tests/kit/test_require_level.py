"""``--stm-require-level``: a run fails unless the backend reaches the level it names."""

from __future__ import annotations

from pathlib import Path

import pytest
from kit_support import ROOMY_TIMEOUT, RunPytest, run_suite
from run_ahead import Ended, Job


@pytest.mark.suite_run(
    Job("require-durable", "reference", ("--stm-require-level=Durable", ROOMY_TIMEOUT))
)
def test_a_reached_level_keeps_the_run_green(suite_result: Ended) -> None:
    report, output = suite_result.report, suite_result.output
    assert report["run"]["exit_status"] == 0, output[-3000:]
    assert "required level Durable reached" in output


@pytest.mark.suite_run(
    Job("require-distributed", "reference", ("--stm-require-level=Distributed", ROOMY_TIMEOUT))
)
def test_a_level_not_reached_fails_a_run_whose_checks_all_pass(suite_result: Ended) -> None:
    report, output = suite_result.report, suite_result.output
    assert report["summary"]["checks"]["failed"] == 0
    assert report["run"]["exit_status"] == 1, output[-3000:]
    assert "exit 1" in output
    assert (
        "FAILED: required level Distributed not reached: capability shared_state not declared"
        in output
    )


def test_a_partial_run_reaches_no_level(tmp_path: Path) -> None:
    report, output = run_suite(
        tmp_path, "reference", ["--stm-require-level=Core", "-k", "test_budget"]
    )
    assert report["summary"]["checks"]["failed"] == 0
    assert report["run"]["exit_status"] == 1, output[-3000:]
    assert "required level Core not reached" in output


def test_the_ini_option_and_an_unknown_level(
    run_pytest: RunPytest, pytester: pytest.Pytester
) -> None:
    pytester.makeini("[pytest]\nstm_require_level = Platinum\n")
    result = run_pytest("--stm-backend=reference")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*ini option stm_require_level: 'Platinum' is not a level (one of Core, Summary, *"]
    )
    result = run_pytest("--stm-backend=reference", "--stm-require-level=core")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--stm-require-level: 'core' is not a level*"])
