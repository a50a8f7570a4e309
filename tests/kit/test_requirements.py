"""Every check names requirements of the spec; the spec parses; levels match section 9."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from kit_support import DOCS, load_json

import stm_conformance
from stm_conformance.capabilities import CAPABILITIES, LEVELS
from stm_conformance.requirements import SpecError, load_spec, parse_spec, spec_path

DUMP_MARKERS = """
import json


def pytest_collection_finish(session):
    def args(item, name):
        return [a for m in item.iter_markers(name) for a in m.args]

    checks = [
        {
            "nodeid": item.nodeid,
            "path": str(item.path),
            "requirements": args(item, "stm_requirement"),
            "capabilities": args(item, "stm_capability"),
            "probes": args(item, "stm_probe"),
        }
        for item in session.items
    ]
    with open("checks.json", "w") as handle:
        json.dump(checks, handle)
"""


@pytest.fixture(scope="module")
def suite_checks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The markers of every collected check of the real suite (collected in a subprocess)."""
    import os
    import subprocess
    import sys

    where = tmp_path_factory.mktemp("collect")
    (where / "dump_markers.py").write_text(DUMP_MARKERS)
    env = {k: v for k, v in os.environ.items() if k not in ("STM_BACKEND", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(where), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "dump_markers", "--stm-backend=reference",
         "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=where, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    checks: list[dict[str, Any]] = load_json(where / "checks.json")
    assert checks, "the suite collected no checks"
    return checks


def test_the_suite_is_collected_from_any_directory(suite_checks: list[dict[str, Any]]) -> None:
    # suite_checks ran ``pytest --stm-backend=reference`` in an empty directory, no paths.
    suite = Path(stm_conformance.__file__).resolve().parent / "suite"
    assert {Path(c["path"]).parent for c in suite_checks} == {suite}
    assert "test_probes.py::test_probe_truncation" in {c["nodeid"] for c in suite_checks}


def test_every_check_names_requirements_of_the_spec(suite_checks: list[dict[str, Any]]) -> None:
    spec = load_spec()
    missing = [c["nodeid"] for c in suite_checks if not c["requirements"]]
    assert not missing, f"checks without @pytest.mark.stm_requirement: {missing}"
    unknown = {
        c["nodeid"]: bad
        for c in suite_checks
        if (bad := [rid for rid in c["requirements"] if rid not in spec])
    }
    assert not unknown, f"checks naming IDs missing from docs/spec.md: {unknown}"


def test_every_check_names_known_capabilities(suite_checks: list[dict[str, Any]]) -> None:
    unknown = {
        c["nodeid"]: bad
        for c in suite_checks
        if (bad := sorted(set(c["capabilities"] + c["probes"]) - CAPABILITIES))
    }
    assert not unknown


def test_every_capability_has_a_probe(suite_checks: list[dict[str, Any]]) -> None:
    probed = {p for c in suite_checks for p in c["probes"]}
    assert probed == CAPABILITIES


def test_every_requirement_has_a_check(suite_checks: list[dict[str, Any]]) -> None:
    spec = load_spec()
    named = {rid for c in suite_checks for rid in c["requirements"]}
    live = {rid for rid, r in spec.requirements.items() if not r.withdrawn}
    assert sorted(live - named) == []


def test_spec_parses_ids_texts_and_version() -> None:
    spec = load_spec()
    assert re.fullmatch(r"\d+\.\d+\.\d+", spec.version)
    assert spec.groups() == ("KEY", "STR", "WM", "BUD", "HLT", "SER", "CB", "CON")
    wm3 = spec.requirements["WM-003"]
    assert wm3.text.startswith("Installing a summary MUST remove from pending exactly the turns")
    assert wm3.text.endswith("turns evicted while the call ran MUST stay pending.")
    assert "Rationale" not in wm3.text
    assert spec.headline("WM-003") == f"WM-003 {wm3.text}"
    assert all(re.fullmatch(r"[A-Z]+-\d{3}", rid) for rid in spec.requirements)


def test_capability_table_and_levels_follow_section_9() -> None:
    text = (DOCS / "spec.md").read_text(encoding="utf-8")
    section_9 = text[text.index("## 9.") :]
    table = set(re.findall(r"^\| `([a-z_]+)` \|", section_9, re.MULTILINE))
    assert table == CAPABILITIES, "section 9 must list exactly the kit's capabilities"
    rows = re.findall(r"^\| (Core|Summary|Durable|Distributed) \| (.+) \|$", text, re.MULTILINE)
    assert [name for name, _ in rows] == list(LEVELS)
    for name, cell in rows:
        assert set(re.findall(r"`([a-z_]+)`", cell)) <= LEVELS[name]
    for lower, higher in zip(list(LEVELS.values()), list(LEVELS.values())[1:], strict=False):
        assert lower < higher


def test_parse_spec_rejects_a_spec_without_version_or_ids() -> None:
    with pytest.raises(SpecError, match="spec_version"):
        parse_spec("- **KEY-001** x. *Rationale: y.*\n")
    with pytest.raises(SpecError, match="no requirement IDs"):
        parse_spec("spec_version: 1.0.0\n")


def test_parse_spec_joins_continuation_lines_and_flags_withdrawn() -> None:
    spec = parse_spec(
        "spec_version: 2.0.0\n\n"
        "- **ABC-001** First line\n  second line. *Rationale: why.*\n"
        "- **ABC-002** *withdrawn* Gone. *Rationale: r.*\n"
    )
    assert spec.version == "2.0.0"
    assert spec.requirements["ABC-001"].text == "First line second line."
    assert spec.requirements["ABC-002"].withdrawn


def test_installed_package_reads_its_own_copy_first(tmp_path: Path) -> None:
    package = tmp_path / "stm_conformance"
    package.mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "spec.md").write_text("docs copy")
    assert spec_path(package) == tmp_path / "docs" / "spec.md"
    (package / "spec.md").write_text("packaged copy")
    assert spec_path(package) == package / "spec.md"
    with pytest.raises(SpecError):
        spec_path(tmp_path / "no" / "spec")
