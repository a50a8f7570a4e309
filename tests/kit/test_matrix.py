"""The conformance matrix: rendered from the committed reports, and the docs match it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from kit_support import DOCS, REPO, load_json, validate_report

from stm_conformance import matrix

#: The column order of ``nox -s matrix`` (``MATRIX_BACKENDS`` in noxfile.py).
BACKENDS = ("reference", "penguiflow", "fakeredis", "redis")
GENERATED = (DOCS / "conformance-matrix.md", REPO / "README.md")


def _reports() -> list[dict[str, Any]]:
    return [load_json(DOCS / "matrix" / f"{name}.json") for name in BACKENDS]


def _links(path: Path) -> matrix.Links:
    """The links ``nox -s matrix`` renders into ``path`` (``--findings penguiflow=...``)."""
    return matrix.find_links({"penguiflow": DOCS / "findings"}, path.parent)


def test_the_committed_reports_are_complete_runs_of_each_backend() -> None:
    for name, report in zip(BACKENDS, _reports(), strict=True):
        validate_report(report)
        assert report["backend"]["name"] == name
        assert report["run"]["complete"], f"{name}: the report is of a partial run"


@pytest.mark.parametrize("path", GENERATED, ids=lambda p: p.name)
def test_the_committed_docs_match_the_reports(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert matrix.update_regions(text, _reports(), _links(path)) == text, (
        f"{path.name} differs from what docs/matrix/*.json give: run `nox -s matrix`"
    )


def test_a_changed_result_changes_the_rendered_docs() -> None:
    reports = _reports()
    text = (DOCS / "conformance-matrix.md").read_text(encoding="utf-8")
    changed = copy.deepcopy(reports)
    changed[0]["requirements"]["WM-003"]["status"] = "fail"
    changed[0]["levels_reached"] = []
    updated = matrix.update_regions(text, changed)
    assert updated != text
    assert "| WM-003 | **FAIL** |" in updated
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "| reference | none | 1 of" in matrix.update_regions(readme, changed)


def test_regions_need_both_markers() -> None:
    with pytest.raises(ValueError, match="no generated region"):
        matrix.update_regions("# nothing here\n", _reports())
    with pytest.raises(ValueError, match="without <!-- stm-matrix:end -->"):
        matrix.update_regions("<!-- stm-matrix:begin -->\n| old |\n", _reports())


def test_the_command_line_checks_and_updates(tmp_path: Path, capsys: Any) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("intro\n<!-- stm-levels:begin -->\nstale\n<!-- stm-levels:end -->\nend\n")
    paths = [str(DOCS / "matrix" / f"{name}.json") for name in BACKENDS]
    assert matrix.main(["--update", str(doc), "--check", *paths]) == 1
    assert "stale" in doc.read_text()
    assert matrix.main(["--update", str(doc), *paths]) == 0
    text = doc.read_text()
    assert text.startswith("intro\n<!-- stm-levels:begin -->\n| backend |") and "stale" not in text
    assert text.endswith("<!-- stm-levels:end -->\nend\n")
    assert matrix.main(["--update", str(doc), "--check", *paths]) == 0
    assert "out of date" in capsys.readouterr().err


def test_penguiflow_failures_link_to_their_reproductions() -> None:
    path = DOCS / "conformance-matrix.md"
    rendered = matrix.render_matrix(_reports(), _links(path))
    reports = dict(zip(BACKENDS, _reports(), strict=True))
    failed = sorted(
        rid
        for rid, r in reports["penguiflow"]["requirements"].items()
        if r["status"] in ("fail", "xfail")
    )
    assert failed, "the committed penguiflow report fails nothing"
    for rid in failed:
        row = next(line for line in rendered.splitlines() if line.startswith(f"| {rid} |"))
        assert f"([repro](findings/{rid}.py))" in row, row
    passing = next(line for line in rendered.splitlines() if line.startswith("| STR-001 |"))
    assert "repro" not in passing
