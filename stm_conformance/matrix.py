"""Render a conformance matrix (Markdown) from ``--stm-report`` JSON files.

Print the table of requirements by backend::

    python -m stm_conformance.matrix reference.json penguiflow.json

Or rewrite the generated regions of Markdown files in place, and with ``--check`` only
say whether they are up to date (exit status 1 when not)::

    python -m stm_conformance.matrix --update docs/conformance-matrix.md --update README.md \\
        [--check] reference.json penguiflow.json

``--findings BACKEND=DIR`` links each failed (or expected-to-fail) requirement of that
backend to its reproduction ``DIR/<ID>.py`` when there is one.

A generated region lies between ``<!-- stm-matrix:begin -->`` and
``<!-- stm-matrix:end -->`` (the table, :func:`render_matrix`) or between
``<!-- stm-levels:begin -->`` and ``<!-- stm-levels:end -->`` (the levels each backend
reached, :func:`render_levels`); the text around it is left as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "REGIONS",
    "Links",
    "find_links",
    "render_levels",
    "render_matrix",
    "replace_region",
    "update_regions",
]

_MARK = {
    "pass": "pass",
    "fail": "**FAIL**",
    "skip": "skip",
    "xfail": "xfail",
    "inconclusive": "inconclusive",
    "untested": "—",
}


#: Links from a cell to a reproduction: backend name -> requirement ID -> link.
Links = Mapping[str, Mapping[str, str]]


def render_matrix(reports: Sequence[dict[str, Any]], links: Links | None = None) -> str:
    """One row per requirement, one column per report; a failed (or expected-to-fail)
    requirement with a link in ``links`` links to its reproduction."""
    links = links or {}
    names = [r["backend"]["name"] for r in reports]
    lines = [
        "| requirement | " + " | ".join(names) + " |",
        "| --- | " + " | ".join("---" for _ in names) + " |",
    ]
    ids = sorted({rid for r in reports for rid in r["requirements"]}, key=_order(reports[0]))
    for rid in ids:
        cells = []
        for report in reports:
            status = report["requirements"].get(rid, {}).get("status", "")
            cell = _MARK.get(status, "?")
            link = links.get(report["backend"]["name"], {}).get(rid)
            if link and status in ("fail", "xfail"):
                cell += f" ([repro]({link}))"
            cells.append(cell)
        lines.append(f"| {rid} | " + " | ".join(cells) + " |")
    lines.append(
        "| **levels reached** | "
        + " | ".join(", ".join(r["levels_reached"]) or "none" for r in reports)
        + " |"
    )
    return "\n".join(lines) + "\n"


def render_levels(reports: Sequence[dict[str, Any]], links: Links | None = None) -> str:
    """One row per report: the backend, the highest level it reached, its failures
    (``links`` is accepted for a uniform signature and not shown)."""
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
REGIONS = {
    "stm-matrix": render_matrix,
    "stm-levels": render_levels,
}


def update_regions(text: str, reports: Sequence[dict[str, Any]], links: Links | None = None) -> str:
    """``text`` with every generated region it holds rendered again from ``reports``
    (``links``: see :func:`render_matrix`).

    Raises:
        ValueError: a region is opened and not closed, or ``text`` holds no region.
    """
    found = False
    for name, render in REGIONS.items():
        if f"<!-- {name}:begin -->" not in text:
            continue
        found = True
        text = replace_region(text, name, render(reports, links))
    if not found:
        raise ValueError(f"no generated region (markers {', '.join(REGIONS)})")
    return text


def replace_region(text: str, name: str, body: str) -> str:
    """``text`` with what lies between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``
    replaced by a newline and ``body`` (which ends with its own newline).

    Raises:
        ValueError: the region is missing, or opened and not closed.
    """
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text:
        raise ValueError(f"no {begin} region")
    if end not in text.split(begin, 1)[1]:
        raise ValueError(f"{begin} without {end}")
    start = text.index(begin)
    stop = text.index(end, start)
    return f"{text[:start]}{begin}\n{body}{text[stop:]}"


def find_links(findings: Mapping[str, Path], base: Path) -> dict[str, dict[str, str]]:
    """The reproductions ``DIR/<ID>.py`` of each backend, as links relative to ``base``
    (the directory of the Markdown file that shows them)."""
    return {
        backend: {
            path.stem: Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()
            for path in sorted(directory.glob("*-[0-9][0-9][0-9].py"))
        }
        for backend, directory in findings.items()
    }


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
    parser.add_argument(
        "--findings",
        action="append",
        default=[],
        metavar="BACKEND=DIR",
        help="link that backend's failed requirements to DIR/<ID>.py where it exists (repeatable)",
    )
    args = parser.parse_args(argv)
    reports = [json.loads(p.read_text(encoding="utf-8")) for p in args.reports]
    findings: dict[str, Path] = {}
    for item in args.findings:
        backend, sep, directory = item.partition("=")
        if not sep or not backend or not Path(directory).is_dir():
            parser.error(f"--findings {item!r}: expected BACKEND=DIR with an existing DIR")
        findings[backend] = Path(directory)
    if not args.update:
        sys.stdout.write(render_matrix(reports, find_links(findings, Path.cwd())))
        return 0
    stale = []
    for path in args.update:
        text = path.read_text(encoding="utf-8")
        try:
            updated = update_regions(text, reports, find_links(findings, path.parent))
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
