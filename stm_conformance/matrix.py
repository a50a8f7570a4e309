"""Render a conformance matrix (Markdown) from ``--stm-report`` JSON files.

python -m stm_conformance.matrix reference.json penguiflow.json > docs/conformance-matrix.md
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["render_matrix"]

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


def _order(report: dict[str, Any]) -> Any:
    groups = list(report["groups"])

    def key(rid: str) -> tuple[int, str]:
        group = rid.split("-")[0]
        return (groups.index(group) if group in groups else len(groups), rid)

    return key


def main(argv: Sequence[str] | None = None) -> int:
    paths = list(sys.argv[1:] if argv is None else argv)
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    reports = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    sys.stdout.write(render_matrix(reports))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
