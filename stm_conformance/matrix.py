"""Render a conformance matrix (Markdown) from ``--stm-report`` JSON files.

Print the table of requirements by backend::

    python -m stm_conformance.matrix reference.json penguiflow.json

Or rewrite the generated regions of Markdown files in place, and with ``--check`` only
say whether they are up to date (exit status 1 when not)::

    python -m stm_conformance.matrix --update docs/conformance-matrix.md --update README.md \\
        [--check] reference.json penguiflow.json

A generated region lies between ``<!-- stm-matrix:begin -->`` and
``<!-- stm-matrix:end -->`` (the table, :func:`render_matrix`) or between
``<!-- stm-levels:begin -->`` and ``<!-- stm-levels:end -->`` (the levels each backend
reached, :func:`render_levels`); the text around it is left as it is.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["REGIONS", "render_levels", "render_matrix", "update_regions"]

_MARK = {
    "pass": "pass",
    "fail": "**FAIL**",
    "skip": "skip",
    "xfail": "xfail",
    "inconclusive": "inconclusive",
    "untested": "—",
}


def render_matrix(reports: Sequence[dict[str, Any]]) -> str:
    """One row per requirement, one column per report."""
    names = [r["backend"]["name"] for r in reports]
    lines = [
        "| requirement | " + " | ".join(names) + " |",
        "| --- | " + " | ".join("---" for _ in names) + " |",
    ]
    ids = sorted({rid for r in reports for rid in r["requirements"]}, key=_order(reports[0]))
    for rid in ids:
        cells = [_MARK.get(r["requirements"].get(rid, {}).get("status", ""), "?") for r in reports]
        lines.append(f"| {rid} | " + " | ".join(cells) + " |")
    lines.append(
        "| **levels reached** | "
        + " | ".join(", ".join(r["levels_reached"]) or "none" for r in reports)
        + " |"
    )
    return "\n".join(lines) + "\n"


def render_levels(reports: Sequence[dict[str, Any]]) -> str:
    """One row per report: the backend, the highest level it reached, its failures."""
    lines = ["| backend | highest level reached | requirements failed |", "| --- | --- | --- |"]
    for report in reports:
        reached = report["levels_reached"]
        failed = [rid for rid, r in report["requirements"].items() if r["status"] == "fail"]
        lines.append(
            f"| {report['backend']['name']} | {reached[-1] if reached else 'none'} | "
            f"{len(failed)} of {len(report['requirements'])} |"
        )
    return "\n".join(lines) + "\n"


#: The generated regions of a Markdown file, by marker name.
REGIONS: dict[str, Callable[[Sequence[dict[str, Any]]], str]] = {
    "stm-matrix": render_matrix,
    "stm-levels": render_levels,
}


def update_regions(text: str, reports: Sequence[dict[str, Any]]) -> str:
    """``text`` with every generated region it holds rendered again from ``reports``.

    Raises:
        ValueError: a region is opened and not closed, or ``text`` holds no region.
    """
    found = False
    for name, render in REGIONS.items():
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        if begin not in text:
            continue
        if end not in text.split(begin, 1)[1]:
            raise ValueError(f"{begin} without {end}")
        found = True
        start, stop = text.index(begin), text.index(end, text.index(begin))
        text = f"{text[:start]}{begin}\n{render(reports)}{text[stop:]}"
    if not found:
        raise ValueError(f"no generated region (markers {', '.join(REGIONS)})")
    return text


def _order(report: dict[str, Any]) -> Any:
    groups = list(report["groups"])

    def key(rid: str) -> tuple[int, str]:
        group = rid.split("-")[0]
        return (groups.index(group) if group in groups else len(groups), rid)

    return key


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m stm_conformance.matrix",
        description="Render a conformance matrix from --stm-report JSON files.",
    )
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT")
    parser.add_argument(
        "--update",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="rewrite the generated regions of this Markdown file (repeatable)",
    )
    parser.add_argument(
        "--check", action="store_true", help="with --update: only say whether files are current"
    )
    args = parser.parse_args(argv)
    reports = [json.loads(p.read_text(encoding="utf-8")) for p in args.reports]
    if not args.update:
        sys.stdout.write(render_matrix(reports))
        return 0
    stale = []
    for path in args.update:
        text = path.read_text(encoding="utf-8")
        try:
            updated = update_regions(text, reports)
        except ValueError as exc:
            parser.error(f"{path}: {exc}")
        if updated != text:
            stale.append(path)
            if not args.check:
                path.write_text(updated, encoding="utf-8")
    for path in stale:
        print(f"{path}: {'out of date' if args.check else 'updated'}", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
