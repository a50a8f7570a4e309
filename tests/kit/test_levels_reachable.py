"""Meta-test: each level is reachable by a backend declaring exactly its capabilities, and
declaring one capability fewer lowers the level (no check depends on an undeclared one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kit_support import failing_checks, run_suite

from stm_conformance.capabilities import LEVELS

#: Levels the reference can reach (Distributed needs ``shared_state``, which it lacks).
REACHABLE = ["Core", "Summary", "Durable"]


def _run(tmp_path: Path, capabilities: frozenset[str]) -> dict[str, object]:
    report, _ = run_suite(
        tmp_path,
        "stm_restricted:restricted",
        env={"STM_TEST_CAPABILITIES": ",".join(sorted(capabilities))},
    )
    return report


@pytest.mark.parametrize("level", REACHABLE)
def test_a_level_is_reached_with_exactly_its_capabilities(level: str, tmp_path: Path) -> None:
    report = _run(tmp_path, LEVELS[level])
    expected = REACHABLE[: REACHABLE.index(level) + 1]
    assert report["levels_reached"] == expected, (
        f"declaring {sorted(LEVELS[level])} reached {report['levels_reached']}, "
        f"want {expected}\n{failing_checks(report)}"  # type: ignore[arg-type]
    )
    assert report["summary"]["checks"]["failed"] == 0  # type: ignore[index]


@pytest.mark.parametrize("missing", sorted(LEVELS["Durable"]))
def test_one_capability_fewer_lowers_the_level(missing: str, tmp_path: Path) -> None:
    report = _run(tmp_path, LEVELS["Durable"] - {missing})
    reached = report["levels_reached"]
    assert "Durable" not in reached, f"Durable reached without {missing!r}"  # type: ignore[operator]
    assert report["summary"]["checks"]["failed"] == 0, failing_checks(report)  # type: ignore[index,arg-type]
    levels = {lv["name"]: lv for lv in report["levels"]}  # type: ignore[attr-defined]
    assert levels["Durable"]["reason"] == f"capability {missing} not declared"


def test_the_differential_catches_a_broken_reference(tmp_path: Path) -> None:
    """Break the reference module itself: the differential's oracle is the kit's model,
    so it still fails, and on the requirement the change breaks."""
    report, output = run_suite(
        tmp_path,
        "stm_restricted:broken_reference",
        ["--pyargs", "stm_conformance.suite.test_differential"],
    )
    checks = [c for c in report["checks"] if "test_differential" in c["nodeid"]]
    assert checks and checks[0]["outcome"] == "failed", output[-3000:]
    assert checks[0]["blamed"] in {"WM-003", "WM-002"}, failing_checks(report)


def test_a_failure_that_does_not_repeat_is_reported_as_a_race(tmp_path: Path) -> None:
    report, output = run_suite(
        tmp_path,
        "stm_restricted:racy",
        ["--pyargs", "stm_conformance.suite.test_differential"],
    )
    check = next(c for c in report["checks"] if "test_differential" in c["nodeid"])
    message = check["message"] or ""
    assert check["outcome"] == "failed", output[-3000:]
    assert check["blamed"] == "BUD-008", message
    assert "not reproducible (a race in the backend)" in message, message
    assert "rerun" in message and "estimate_tokens()" in message, message
