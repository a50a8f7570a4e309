"""Levels come from results only: every check of a level's capabilities ran and passed."""

from __future__ import annotations

from stm_conformance.report import CheckResult, Results
from stm_conformance.requirements import load_spec

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
        out.checks[name] = CheckResult(
            nodeid=name,
            requirements=(rid,),
            capabilities=capabilities,
            probe=None,
            xfail_category=None,
            outcome=outcomes.get(name, "passed"),  # type: ignore[arg-type]
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
    assert distributed.reason == "1 skipped; first: shared"


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
