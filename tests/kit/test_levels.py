"""Levels come from results only: every check of a level's capabilities ran and passed."""

from __future__ import annotations

import pytest

from stm_conformance._deadline import NOT_CONCLUDED, CheckOutOfTime, LeftoverTaskError
from stm_conformance.report import CheckResult, Results, blame_exception
from stm_conformance.requirements import load_spec
from stm_conformance.suite.test_health import _before_retry

CHECKS = [
    ("always", (), "STR-001"),
    ("trunc", ("truncation",), "STR-002"),
    ("rolling", ("rolling_summary",), "WM-003"),
    ("serial", ("serialization",), "SER-002"),
    ("persist", ("persistence",), "SER-005"),
    ("callbacks", ("callbacks",), "CB-001"),
    ("shared", ("shared_state",), "CON-002"),
]


def results(**outcomes: str) -> Results:
    out = Results(load_spec())
    for name, capabilities, rid in CHECKS:
        outcome = outcomes.get(name, "passed")
        out.checks[name] = CheckResult(
            nodeid=name,
            requirements=(rid,),
            capabilities=capabilities,
            probe=None,
            xfail_category=None,
            outcome=outcome,  # type: ignore[arg-type]
            # As recorded from a report: a failure is blamed on the requirement it is about.
            blamed=rid if outcome in ("failed", "xfailed") else None,
        )
    return out


def reached(r: Results, *, complete: bool = True) -> list[str]:
    return [level.name for level in r.levels(complete=complete) if level.reached]


def test_all_passing_reaches_every_level() -> None:
    assert reached(results()) == ["Core", "Summary", "Durable", "Distributed"]


def test_a_skip_is_not_a_pass() -> None:
    r = results(shared="skipped")
    assert reached(r) == ["Core", "Summary", "Durable"]
    distributed = r.levels(complete=True)[-1]
    assert distributed.reason == "1 skipped; first skipped: shared"


def test_expected_failures_and_failures_block_the_level_and_all_above() -> None:
    assert reached(results(rolling="xfailed")) == ["Core"]
    assert reached(results(always="failed")) == []


def test_capabilities_outside_every_level_do_not_matter() -> None:
    assert reached(results(callbacks="failed")) == ["Core", "Summary", "Durable", "Distributed"]


def test_partial_runs_reach_nothing() -> None:
    assert reached(results(), complete=False) == []


def test_a_level_needs_a_passing_check_of_each_capability() -> None:
    r = results()
    del r.checks["persist"]
    assert reached(r) == ["Core", "Summary"]
    durable = r.levels(complete=True)[2]
    assert durable.reason == "no passing check of capability persistence"


def test_requirement_status_prefers_fail_then_xfail_then_pass_then_skip() -> None:
    r = results(trunc="skipped")
    statuses = {rid: status for rid, (status, _, _) in r.requirement_statuses().items()}
    assert statuses["STR-001"] == "pass"
    assert statuses["STR-002"] == "skip"
    assert statuses["KEY-003"] == "untested"
    r = results(rolling="xfailed")
    assert r.requirement_statuses()["WM-003"][0] == "xfail"


def test_a_check_not_concluded_is_inconclusive_for_every_requirement_it_checks() -> None:
    r = results(rolling="failed", serial="xfailed")
    r.checks["rolling"].blamed = r.checks["serial"].blamed = None
    statuses = r.requirement_statuses()
    assert statuses["WM-003"][0] == "inconclusive"
    assert statuses["SER-002"][0] == "inconclusive"
    assert reached(r) == ["Core"]


def test_the_reason_names_a_failure_before_a_skip() -> None:
    r = results(shared="skipped", persist="failed")
    r.checks["persist"].blamed = "SER-005"
    distributed = r.levels(complete=True)[-1]
    assert distributed.reason == "1 failed, 1 skipped; first failed: persist (SER-005)"


def test_the_reason_names_an_undeclared_capability() -> None:
    r = results()
    declared = frozenset({"truncation", "rolling_summary", "serialization"})
    levels = {level.name: level for level in r.levels(complete=True, declared=declared)}
    assert levels["Summary"].reached
    assert levels["Durable"].reason == "capability persistence not declared"


def test_a_failure_is_blamed_on_one_requirement_and_inconclusive_for_the_rest() -> None:
    r = results()
    r.checks["multi"] = CheckResult(
        nodeid="multi",
        requirements=("BUD-004", "BUD-010"),
        capabilities=("rolling_summary",),
        probe=None,
        xfail_category=None,
    )
    check = r.checks["multi"]
    check.outcome, check.message = "failed", "AssertionError: BUD-008: estimate differs"
    check.blamed = r.blame(check.message, check.requirements)
    statuses = {rid: status for rid, (status, _, _) in r.requirement_statuses().items()}
    assert check.blamed == "BUD-008"
    assert statuses["BUD-008"] == "fail", "blamed although the check is not marked with it"
    assert statuses["BUD-004"] == statuses["BUD-010"] == "inconclusive"
    assert r.blame("TypeError: boom", ("BUD-004", "BUD-010")) == "BUD-004"
    assert r.blame("AssertionError: XYZ-999: not in the spec", ("BUD-004",)) == "BUD-004"


def test_members_of_a_group_that_were_not_concluded_do_not_decide_its_blame() -> None:
    """Hypothesis' "distinct failures" of one check: examples that found a task left
    running (CON-003) and one its time limit stopped with nothing found stuck. The group
    is blamed on CON-003, not on the check's own requirement."""
    spec = load_spec()
    leftover = LeftoverTaskError("CON-003: a task (Task-7) started during a check ...")
    out_of_time = CheckOutOfTime(f"{NOT_CONCLUDED}: check did not finish within 0.2s")
    anyio_group = ExceptionGroup("Multiple exceptions occurred", [leftover, leftover])
    found = BaseExceptionGroup("Hypothesis found 2 distinct failures.", [anyio_group, out_of_time])
    assert blame_exception(found, ("SER-002",), spec) == "CON-003"
    # Only members that ran out of time: no requirement was judged.
    nothing = BaseExceptionGroup(
        "Hypothesis found 2 distinct failures.", [out_of_time, out_of_time]
    )
    assert blame_exception(nothing, ("SER-002",), spec) is None
    # Concluded members that disagree still blame the check's own requirement.
    mixed = ExceptionGroup("two", [leftover, AssertionError("BUD-008: estimate differs")])
    assert blame_exception(mixed, ("SER-002",), spec) == "SER-002"
    assert blame_exception(BaseExceptionGroup("g", [mixed, out_of_time]), ("SER-002",), spec) == (
        "SER-002"
    )


def test_a_retry_that_came_on_time_while_the_check_was_not_scheduled_blames_nothing() -> None:
    """HLT-002's checks act between retry 1 and retry 2. Retry 2 already there when the
    check looks: early, the backend is wrong; on time (the check was starved for the whole
    backoff), the check is not concluded and blames no requirement."""
    spec, backoff = load_spec(), 0.6
    _before_retry([0.0, 0.1], 2, backoff, "retry 2")  # retry 2 not come: the check goes on
    with pytest.raises(AssertionError, match=r"^HLT-002: retry 2 came 0\.200s after the call"):
        _before_retry([0.0, 0.1, 0.3], 2, backoff, "retry 2")
    with pytest.raises(CheckOutOfTime) as stopped:
        _before_retry([0.0, 0.1, 0.75], 2, backoff, "retry 2")
    assert str(stopped.value).startswith(f"{NOT_CONCLUDED}: retry 2 came on time, 0.650s")
    assert blame_exception(stopped.value, ("HLT-002",), spec) is None
