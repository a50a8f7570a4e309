"""Meta-test: each level is reachable by a backend declaring exactly its capabilities, and
declaring one capability fewer lowers the level (no check depends on an undeclared one).

The whole-suite runs are started ahead (``run_ahead``) and judged at the end."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from kit_support import ROOMY_TIMEOUT, failing_checks
from run_ahead import Ended, Job

from stm_conformance.capabilities import LEVELS

#: Levels the reference can reach (Distributed needs ``shared_state``, which it lacks).
REACHABLE = ["Core", "Summary", "Durable"]


def _job(name: str, capabilities: frozenset[str]) -> Job:
    env = (("STM_TEST_CAPABILITIES", ",".join(sorted(capabilities))),)
    return Job(f"levels-{name}", "stm_restricted:restricted", (ROOMY_TIMEOUT,), env=env)


def _params(names: list[str], capabilities: Mapping[str, frozenset[str]]) -> list[object]:
    return [
        pytest.param(name, marks=pytest.mark.suite_run(_job(name, capabilities[name])))
        for name in names
    ]


@pytest.mark.parametrize("level", _params(REACHABLE, LEVELS))
def test_a_level_is_reached_with_exactly_its_capabilities(level: str, suite_result: Ended) -> None:
    report = suite_result.report
    expected = REACHABLE[: REACHABLE.index(level) + 1]
    assert report["levels_reached"] == expected, (
        f"declaring {sorted(LEVELS[level])} reached {report['levels_reached']}, "
        f"want {expected}\n{failing_checks(report)}"
    )
    assert report["summary"]["checks"]["failed"] == 0


_DURABLE_BUT = {name: LEVELS["Durable"] - {name} for name in LEVELS["Durable"]}


@pytest.mark.parametrize("missing", _params(sorted(_DURABLE_BUT), _DURABLE_BUT))
def test_one_capability_fewer_lowers_the_level(missing: str, suite_result: Ended) -> None:
    report = suite_result.report
    reached = report["levels_reached"]
    assert "Durable" not in reached, f"Durable reached without {missing!r}"
    assert report["summary"]["checks"]["failed"] == 0, failing_checks(report)
    levels = {lv["name"]: lv for lv in report["levels"]}
    assert levels["Durable"]["reason"] == f"capability {missing} not declared"


_DIFFERENTIAL = ("--pyargs", "stm_conformance.suite.test_differential")


@pytest.mark.suite_run(Job("broken-reference", "stm_restricted:broken_reference", _DIFFERENTIAL))
def test_the_differential_catches_a_broken_reference(suite_result: Ended) -> None:
    """Break the reference module itself: the differential's oracle is the kit's model,
    so it still fails, and on the requirement the change breaks."""
    report, output = suite_result.report, suite_result.output
    checks = [c for c in report["checks"] if "test_differential" in c["nodeid"]]
    assert checks and checks[0]["outcome"] == "failed", output[-3000:]
    assert checks[0]["blamed"] in {"WM-003", "WM-002"}, failing_checks(report)


@pytest.mark.suite_run(Job("racy", "stm_restricted:racy", _DIFFERENTIAL))
def test_a_failure_that_does_not_repeat_is_reported_as_a_race(suite_result: Ended) -> None:
    report, output = suite_result.report, suite_result.output
    check = next(c for c in report["checks"] if "test_differential" in c["nodeid"])
    message = check["message"] or ""
    assert check["outcome"] == "failed", output[-3000:]
    assert check["blamed"] == "BUD-008", message
    assert "not reproducible (a race in the backend)" in message, message
    assert "rerun" in message and "estimate_tokens()" in message, message


#: The differential's "retry" script alone: its first memory is the run with exceptions.
_RETRY_SCRIPT = (
    "--pyargs",
    "stm_conformance.suite.test_differential::"
    "test_operations_while_a_retry_or_recovery_runs_match_the_spec_model[retry]",
)


@pytest.mark.suite_run(
    Job("sticky-after-first", "stm_restricted:sticky_after_first", _RETRY_SCRIPT)
)
def test_a_failure_count_bug_seen_after_invalid_output_is_not_blamed_on_it(
    suite_result: Ended,
) -> None:
    """The script's run with exceptions matches the model; the next, with invalid output,
    shows a failure count kept through a recovery. That is HLT-004's, not HLT-007's: the
    same operations with exceptions, run again, show it too."""
    report, output = suite_result.report, suite_result.output
    [check] = report["checks"]
    assert check["outcome"] == "failed", output[-3000:]
    assert check["blamed"] == "HLT-004", check["message"]
