"""Where the suite runs: only where asked for, and its printed node IDs can be rerun."""

from __future__ import annotations

import re

import pytest
from kit_support import ROOMY_TIMEOUT, RunPytest, assert_passed_everything, load_json

OWN_TEST = "def test_own():\n    pass\n"
#: A backend that passes the probes but overstates its token count: budget checks fail.
OVERCOUNTING = """
from reference_impl import DefaultShortTermMemory
from stm_conformance import Provider


class Overcounting(DefaultShortTermMemory):
    def estimate_tokens(self):
        return super().estimate_tokens() + 10_000


async def create(config, key, summarizer):
    return Overcounting(config=config, summarizer=summarizer, key=key)


provider = Provider(name="overcounting", create=create, capabilities=frozenset({"truncation"}))
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A backend's repository: its own tests under ``testpaths``."""
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_own.py").write_text(OWN_TEST)
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    return pytester


def collected(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if "::" in line and " " not in line]


@pytest.mark.parametrize("source", ["env", "ini"])
def test_environment_or_ini_backend_keeps_the_projects_own_tests(
    project: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    if source == "env":
        monkeypatch.setenv("STM_BACKEND", "reference")
    else:
        project.makeini("[pytest]\ntestpaths = tests\nstm_backend = reference\n")
    result = run_pytest("-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"stm backend: reference = reference_impl.provider:provider (from {source}: *",
            "stm suite: not collected here (add --stm-suite to run it)",
            "tests/test_own.py::test_own PASSED*",
        ]
    )


def test_backend_on_the_command_line_without_paths_runs_only_the_suite(
    project: pytest.Pytester, run_pytest: RunPytest
) -> None:
    result = run_pytest("--stm-backend=reference", "--collect-only", "-q")
    nodeids = collected(result)
    assert "test_probes.py::test_probe_truncation" in nodeids
    assert not [n for n in nodeids if "test_own" in n]
    result.stdout.no_fnmatch_line("stm suite: not collected*")


def test_backend_on_the_command_line_with_paths_runs_those_paths(
    project: pytest.Pytester, run_pytest: RunPytest
) -> None:
    result = run_pytest("--stm-backend=reference", "tests", "--collect-only", "-q")
    assert collected(result) == ["tests/test_own.py::test_own"]


def test_stm_suite_adds_the_suite_with_the_configured_backend(
    project: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STM_BACKEND", "reference")
    listing = run_pytest("--stm-suite", "--collect-only", "-q")
    alone = collected(listing)
    checks = int(re.findall(r"(\d+) tests? collected", listing.stdout.str())[-1])
    assert "test_probes.py::test_probe_truncation" in alone
    assert "tests/test_own.py::test_own" not in alone
    both = run_pytest("--stm-suite", "tests", "--stm-report=report.json", ROOMY_TIMEOUT)
    # The whole suite ran and passed: the report is complete although the own test ran
    # beside it (a failure names the failing checks and their blame).
    report = load_json(project.path / "report.json")
    assert_passed_everything(report, both.stdout.str(), "the reference beside a project's test")
    # Every check but the two of shared_state (not declared), and the project's own test.
    both.assert_outcomes(passed=checks - 2 + 1, skipped=2)
    assert "Core" in report["levels_reached"]


def test_stm_suite_without_a_backend_uses_the_reference(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    result = run_pytest("--stm-suite", "--collect-only", "-k", "probe_truncation")
    result.stdout.fnmatch_lines(
        [
            "stm backend: reference = * (from default: reference)",
            "*<Function test_probe_truncation>",
            "*1/* tests collected*",
        ]
    )


def test_printed_node_id_of_a_failure_reruns_exactly_that_check(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    pytester.makepyfile(overcounting=OVERCOUNTING)
    backend = "--stm-backend=overcounting:provider"
    first = run_pytest(backend, "-k", "test_truncation_stays_within_budget", "-rf")
    failed = re.findall(r"^FAILED (\S+)", first.stdout.str(), re.MULTILINE)
    assert failed and all(n.startswith("test_budget.py::") for n in failed), failed
    nodeid = failed[-1]
    assert nodeid.endswith("]"), nodeid  # a parametrized check, as printed
    again = run_pytest(backend, nodeid, "-rf")
    again.assert_outcomes(failed=1)
    assert f"FAILED {nodeid}" in again.stdout.str()


def test_a_local_file_of_the_same_name_wins_over_the_suite(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    pytester.makepyfile(test_budget=OWN_TEST)
    result = run_pytest("--stm-backend=reference", "test_budget.py", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_budget.py::test_own PASSED*"])


def test_ini_report_level_and_expected_failures_are_for_runs_of_checks(
    project: pytest.Pytester, run_pytest: RunPytest
) -> None:
    """A backend repository's ini file may set what its runs of the suite write and
    require; plain ``pytest`` there runs its own tests, which are no checks: it writes no
    report, requires no level and finds no expected failure unused, even under
    ``-W error``. The same level asked for on the command line fails the run."""
    (project.path / "xfail.toml").write_text(
        '["WM-003"]\nreason = "tracked upstream"\ncategory = "known_bug"\n'
    )
    project.makeini(
        "[pytest]\ntestpaths = tests\nstm_backend = reference\nstm_report = stm-report.json\n"
        "stm_require_level = Durable\nstm_xfail = xfail.toml\n"
    )
    result = run_pytest("-W", "error")
    result.assert_outcomes(passed=1)
    assert result.ret == 0, result.stdout.str()
    assert not (project.path / "stm-report.json").exists()
    result = run_pytest("--stm-require-level=Core")
    result.assert_outcomes(passed=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["FAILED: required level Core not reached: no conformance check ran (add --stm-suite*"]
    )
