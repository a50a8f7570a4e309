"""Render the requirement-by-scenario coverage table from a ``--stm-report`` JSON file.

Each check's report entry lists the scenarios it exercised (observed while it ran, see
:mod:`stm_conformance.scenarios`, plus what it declares with ``stm_scenario``). A
requirement covers a scenario when a check of that requirement *passed* while exercising
it. Every scenario a requirement does not cover is a gap, and every gap must be explained
by a rule of the gaps file (TOML)::

    [[gap]]
    requirements = ["KEY-*"]            # fnmatch patterns of requirement IDs
    scenarios = ["in_flight:*"]         # fnmatch patterns of dimension:value tags
    why = "keys are resolved before a memory exists, so before any summarizer call"

Pairs of values of the ``PAIRWISE`` dimensions exercised by one memory are checked the
same way, as the pseudo-requirement ``pairwise`` with tags ``dimension:value&dimension:value``.

Rewrite the generated region of a Markdown file (between ``<!-- stm-coverage:begin -->``
and ``<!-- stm-coverage:end -->``), or with ``--check`` only say whether it is up to date
and every gap explained (exit status 1 when not)::

    python -m stm_conformance.coverage docs/matrix/reference.json \\
        --gaps docs/coverage-gaps.toml --update docs/coverage.md [--check]
"""

from __future__ import annotations

import argparse
import fnmatch
import itertools
import json
import sys
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .matrix import replace_region
from .scenarios import DIMENSIONS, PAIRWISE

__all__ = ["GapRule", "Coverage", "load_gap_rules", "measure", "render", "main"]

REGION = "stm-coverage"
PAIRWISE_ID = "pairwise"
#: The values each pairwise dimension takes in a ``combo:`` tag, in its order.
_COMBO_VALUES: dict[str, tuple[str, ...]] = {
    **{name: DIMENSIONS[name] for name in ("strategy", "overflow", "health", "callbacks")},
    "round_trip": ("yes", "no"),
}


@dataclass(frozen=True)
class GapRule:
    """Why some requirements need not (or cannot) cover some scenarios."""

    requirements: tuple[str, ...]
    scenarios: tuple[str, ...]
    why: str

    def explains(self, requirement: str, tag: str) -> bool:
        return any(fnmatch.fnmatchcase(requirement, p) for p in self.requirements) and any(
            fnmatch.fnmatchcase(tag, p) for p in self.scenarios
        )


@dataclass
class Coverage:
    """Covered and missing scenarios of every requirement, and how each gap is explained."""

    #: Requirement ID -> covered tags, in the spec's order of requirements.
    covered: dict[str, set[str]]
    #: (requirement, tag) of every gap, by the index of the first rule explaining it.
    explained: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    unexplained: list[tuple[str, str]] = field(default_factory=list)
    unused_rules: list[GapRule] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unexplained and not self.unused_rules


def load_gap_rules(path: Path) -> list[GapRule]:
    """The ``[[gap]]`` rules of a TOML file; :class:`ValueError` when one is malformed."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    rules = []
    for index, entry in enumerate(data.get("gap", [])):
        try:
            rule = GapRule(
                tuple(entry["requirements"]), tuple(entry["scenarios"]), str(entry["why"])
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(
                f"{path}: gap #{index + 1} needs requirements, scenarios and why"
            ) from exc
        if not rule.why.strip() or "\n" in rule.why:
            raise ValueError(f"{path}: gap #{index + 1}: 'why' must be one line")
        rules.append(rule)
    return rules


def all_tags() -> list[str]:
    return [f"{dim}:{value}" for dim, values in DIMENSIONS.items() for value in values]


def all_pairs() -> list[str]:
    tags = []
    for a, b in itertools.combinations(PAIRWISE, 2):
        for x, y in itertools.product(_COMBO_VALUES[a], _COMBO_VALUES[b]):
            tags.append(f"{a}:{x}&{b}:{y}")
    return tags


def _pairs_of(combo: str) -> set[str]:
    """The pairwise tags of one ``combo:strategy/overflow/health+health/cb/round_trip``."""
    parts = combo.removeprefix("combo:").split("/")
    if len(parts) != len(PAIRWISE):
        return set()
    values = [part.split("+") for part in parts]
    pairs = set()
    for (i, a), (j, b) in itertools.combinations(enumerate(PAIRWISE), 2):
        for x, y in itertools.product(values[i], values[j]):
            pairs.add(f"{a}:{x}&{b}:{y}")
    return pairs


def measure(report: Mapping[str, Any], rules: Sequence[GapRule]) -> Coverage:
    """What the passed checks of ``report`` cover, and how ``rules`` explain the rest."""
    order = list(report["requirements"])
    covered: dict[str, set[str]] = {rid: set() for rid in order}
    pairs: set[str] = set()
    for check in report["checks"]:
        if check["outcome"] != "passed":
            continue
        tags = set(check.get("scenarios", ()))
        for rid in check["requirements"]:
            covered.setdefault(rid, set()).update(t for t in tags if not t.startswith("combo:"))
        for tag in tags:
            if tag.startswith("combo:"):
                pairs |= _pairs_of(tag)
    covered[PAIRWISE_ID] = pairs
    result = Coverage(covered)
    used = set()
    for rid, tags in covered.items():
        wanted = all_pairs() if rid == PAIRWISE_ID else all_tags()
        for tag in wanted:
            if tag in tags:
                continue
            index = next((i for i, r in enumerate(rules) if r.explains(rid, tag)), None)
            if index is None:
                result.unexplained.append((rid, tag))
            else:
                used.add(index)
                result.explained.setdefault(index, []).append((rid, tag))
    result.unused_rules = [r for i, r in enumerate(rules) if i not in used]
    return result


def _cell(values: Iterable[str]) -> str:
    return ", ".join(values) or "—"


def _compact(ids: Iterable[str]) -> str:
    """``WM-001..WM-008`` style ranges of sorted IDs, for the gaps table."""
    by_group: dict[str, list[int]] = {}
    other = []
    for rid in ids:
        group, _, number = rid.partition("-")
        if number.isdigit():
            by_group.setdefault(group, []).append(int(number))
        else:
            other.append(rid)
    parts = []
    for group, numbers in by_group.items():
        numbers = sorted(set(numbers))
        runs: list[list[int]] = []
        for n in numbers:
            if runs and n == runs[-1][-1] + 1:
                runs[-1].append(n)
            else:
                runs.append([n])
        for run in runs:
            first, last = f"{group}-{run[0]:03d}", f"{group}-{run[-1]:03d}"
            parts.append(first if len(run) == 1 else f"{first}..{last}")
    return ", ".join(parts + sorted(set(other)))


def render(report: Mapping[str, Any], coverage: Coverage, rules: Sequence[GapRule]) -> str:
    """The generated region: per group, requirements by dimensions; pairs; the gaps."""
    lines: list[str] = []
    dims = list(DIMENSIONS)
    groups: dict[str, list[str]] = {}
    for rid in coverage.covered:
        if rid != PAIRWISE_ID:
            groups.setdefault(rid.split("-")[0], []).append(rid)
    for group, ids in groups.items():
        lines += [f"### {group}", "", "| requirement | " + " | ".join(dims) + " |"]
        lines.append("| --- | " + " | ".join("---" for _ in dims) + " |")
        for rid in ids:
            tags = coverage.covered[rid]
            cells = [_cell(v for v in DIMENSIONS[dim] if f"{dim}:{v}" in tags) for dim in dims]
            lines.append(f"| {rid} | " + " | ".join(cells) + " |")
        lines.append("")
    pairs = coverage.covered[PAIRWISE_ID]
    lines += ["### Pairs exercised by one memory", ""]
    for a, b in itertools.combinations(PAIRWISE, 2):
        lines += [f"| {a} \\ {b} | " + " | ".join(_COMBO_VALUES[b]) + " |"]
        lines.append("| --- | " + " | ".join("---" for _ in _COMBO_VALUES[b]) + " |")
        for x in _COMBO_VALUES[a]:
            row = ["yes" if f"{a}:{x}&{b}:{y}" in pairs else "·" for y in _COMBO_VALUES[b]]
            lines.append(f"| {x} | " + " | ".join(row) + " |")
        lines.append("")
    lines += ["### Gaps and why", "", "| requirements | scenarios not covered | why |"]
    lines.append("| --- | --- | --- |")
    for index, gaps in sorted(coverage.explained.items()):
        explained_ids = _compact(sorted({rid for rid, _ in gaps}))
        explained_tags = ", ".join(sorted({tag for _, tag in gaps}))
        lines.append(f"| {explained_ids} | {explained_tags} | {rules[index].why} |")
    lines.append("")
    if coverage.unexplained:
        open_gaps: dict[str, list[str]] = {}
        for rid, tag in coverage.unexplained:
            open_gaps.setdefault(rid, []).append(tag)
        lines += [
            "### Unexplained gaps",
            "",
            f"{len(coverage.unexplained)} scenarios no check covers and no rule explains.",
            "",
            "| requirement | scenarios not covered |",
            "| --- | --- |",
        ]
        lines += [f"| {rid} | {', '.join(tags)} |" for rid, tags in open_gaps.items()]
        lines.append("")
    checks = sum(1 for c in report["checks"] if c["outcome"] == "passed")
    lines.append(
        f"From {checks} passed checks of `{report['backend']['name']}` "
        f"(spec {report['spec_version']})."
    )
    return "\n".join(lines)


def update_region(text: str, region: str) -> str:
    """``text`` with its generated region replaced by ``region``."""
    return replace_region(text, REGION, region + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m stm_conformance.coverage",
        description="Render the requirement x scenario coverage table from a JSON report.",
    )
    parser.add_argument("report", type=Path, metavar="REPORT")
    parser.add_argument("--gaps", type=Path, required=True, help="TOML file of [[gap]] rules")
    parser.add_argument("--update", type=Path, help="Markdown file whose region to rewrite")
    parser.add_argument("--check", action="store_true", help="only say whether it is current")
    parser.add_argument(
        "--strict", action="store_true", help="also fail on unexplained gaps (exit status 1)"
    )
    args = parser.parse_args(argv)
    report = json.loads(args.report.read_text(encoding="utf-8"))
    try:
        rules = load_gap_rules(args.gaps)
    except ValueError as exc:
        parser.error(str(exc))
    coverage = measure(report, rules)
    region = render(report, coverage, rules)
    status = 0
    for rule in coverage.unused_rules:
        print(f"gap rule explains nothing: {rule.requirements} {rule.scenarios}", file=sys.stderr)
        status = 1
    if coverage.unexplained:
        print(f"{len(coverage.unexplained)} unexplained gaps", file=sys.stderr)
        if args.strict:
            status = 1
    if args.update is None:
        print(region)
        return status
    old = args.update.read_text(encoding="utf-8")
    new = update_region(old, region)
    if args.check:
        if new != old:
            print(f"{args.update} is out of date: run without --check", file=sys.stderr)
            return 1
        return status
    args.update.write_text(new, encoding="utf-8")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
