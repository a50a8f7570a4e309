"""docs/coverage.md: generated from the reference's committed report, every gap rule used."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from kit_support import DOCS, load_json

from stm_conformance import coverage
from stm_conformance.scenarios import DIMENSIONS

GAPS = DOCS / "coverage-gaps.toml"
DOC = DOCS / "coverage.md"


def _report() -> dict:  # type: ignore[type-arg]
    return load_json(DOCS / "matrix" / "reference.json")


def test_the_committed_doc_matches_the_report_and_every_rule_explains_a_gap() -> None:
    rules = coverage.load_gap_rules(GAPS)
    measured = coverage.measure(_report(), rules)
    assert not measured.unused_rules, f"gap rules that explain nothing: {measured.unused_rules}"
    text = DOC.read_text(encoding="utf-8")
    region = coverage.render(_report(), measured, rules)
    assert coverage.update_region(text, region) == text, (
        "docs/coverage.md differs from what docs/matrix/reference.json gives: run `nox -s matrix`"
    )


def test_every_check_of_the_reference_report_lists_its_scenarios() -> None:
    known = {f"{d}:{v}" for d, values in DIMENSIONS.items() for v in values}
    for check in _report()["checks"]:
        if check["outcome"] != "passed":
            continue
        tags = set(check["scenarios"])
        assert tags <= known | {t for t in tags if t.startswith("combo:")}, check["nodeid"]


def test_a_scenario_counts_only_for_passed_checks_of_its_requirements() -> None:
    report = {
        "backend": {"name": "x"},
        "spec_version": "1",
        "requirements": {"WM-001": {}, "WM-002": {}},
        "checks": [
            {"outcome": "passed", "requirements": ["WM-001"], "scenarios": ["text:astral"]},
            {"outcome": "failed", "requirements": ["WM-002"], "scenarios": ["text:empty"]},
        ],
    }
    measured = coverage.measure(report, [])
    assert measured.covered["WM-001"] == {"text:astral"}
    assert measured.covered["WM-002"] == set()
    assert ("WM-002", "text:empty") in measured.unexplained
    assert ("WM-001", "text:astral") not in measured.unexplained


def test_pairs_come_from_one_memory_and_rules_explain_by_pattern() -> None:
    report = {
        "backend": {"name": "x"},
        "spec_version": "1",
        "requirements": {"WM-001": {}},
        "checks": [
            {
                "outcome": "passed",
                "requirements": ["WM-001"],
                "scenarios": ["combo:rolling_summary/unlimited/healthy+retry/off/no"],
            }
        ],
    }
    rule = coverage.GapRule(("WM-*",), ("text:*",), "not about text")
    measured = coverage.measure(report, [rule])
    pairs = measured.covered[coverage.PAIRWISE_ID]
    assert "strategy:rolling_summary&health:retry" in pairs
    assert "health:healthy&callbacks:off" in pairs
    assert "strategy:truncation&health:retry" not in pairs
    explained = {tag for _, tag in measured.explained[0]}
    assert explained == {f"text:{v}" for v in DIMENSIONS["text"]}
    assert not measured.unused_rules


def test_a_rule_that_explains_nothing_is_reported(tmp_path: Path) -> None:
    stale = coverage.GapRule(("NOPE-*",), ("text:*",), "matches no requirement")
    measured = coverage.measure(copy.deepcopy(_report()), [stale])
    assert measured.unused_rules == [stale]


MALFORMED = (
    '[[gap]]\nrequirements = ["A"]\n',
    '[[gap]]\nrequirements = ["A"]\nscenarios = ["x"]\nwhy = "two\\nlines"\n',
)


@pytest.mark.parametrize("body", MALFORMED)
def test_a_malformed_rule_is_a_value_error(tmp_path: Path, body: str) -> None:
    path = tmp_path / "gaps.toml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ValueError, match="gap #1"):
        coverage.load_gap_rules(path)


async def _observe_one_memory() -> set[str]:
    import asyncio
    from types import SimpleNamespace

    from stm_conformance.contract import ConversationTurn, ShortTermMemoryConfig, TrajectoryDigest
    from stm_conformance.scenarios import observing, track

    class Memory:
        health = SimpleNamespace(value="healthy")

        async def add_turn(self, turn: object) -> None:
            pass

        def from_dict(self, state: object) -> None:
            raise ValueError("refused")

    gate = asyncio.Event()

    async def summarizer(payload: object) -> dict[str, str]:
        await gate.wait()
        raise RuntimeError("fails")

    with observing() as tags:
        config = ShortTermMemoryConfig(strategy="rolling_summary")
        tracker = track(config)
        assert tracker is not None
        memory = Memory()
        tracker.attach(memory)
        call = asyncio.ensure_future(tracker.summarizer(summarizer)({}))
        await asyncio.sleep(0)
        digest = TrajectoryDigest(tools_invoked=[], observations_summary="")
        await tracker.wrap("add_turn", memory.add_turn)(ConversationTurn("𝄞", "", digest))
        with pytest.raises(ValueError):
            tracker.wrap("from_dict", memory.from_dict)({})
        gate.set()
        with pytest.raises(RuntimeError):
            await call
    return tags


def test_a_tracker_notes_what_happens_while_a_call_is_in_flight() -> None:
    import asyncio

    tags = asyncio.run(_observe_one_memory())
    assert {
        "strategy:rolling_summary",
        "overflow:truncate_oldest",
        "callbacks:off",
        "health:healthy",
        "text:astral",
        "text:non_ascii",
        "text:empty",
        "tools:without",
        "direction:reject",
        "state:from_dict",
        "summarizer:exception",
        "in_flight:normal+add_turn",
        "in_flight:normal+from_dict",
        "in_flight:normal+fails",
    } <= tags, sorted(tags)
    assert "combo:rolling_summary/truncate_oldest/healthy/off/yes" in tags, sorted(tags)
    assert "summarizer:valid" not in tags and "text:huge" not in tags
