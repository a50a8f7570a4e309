"""The reproductions of docs/findings/ still reproduce, one per failing requirement.

Each ``docs/findings/<ID>.py`` runs against PenguiFlow alone and ends by asserting what the
spec requires of ``<ID>``, so on the pinned PenguiFlow it exits with an ``AssertionError``
whose message starts with the ID. ``adapters/stm_penguiflow/xfail.toml`` names the
requirements PenguiFlow fails; every one of them has a reproduction, and no other.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("penguiflow")

REPO = Path(__file__).resolve().parents[2]
FINDINGS = REPO / "docs" / "findings"
XFAIL_FILE = REPO / "adapters" / "stm_penguiflow" / "xfail.toml"
#: Each reproduction takes a second or two; this only guards against a hang.
TIMEOUT_S = 30

REQUIREMENT_ID = re.compile(r"^[A-Z]+-\d{3}$")
#: A check entry's reason names the requirement it fails first: ``"WM-006: ..."``.
REASON_ID = re.compile(r"^([A-Z]+-\d{3}):")
#: What a reproduction may import besides the standard library.
ALLOWED_IMPORTS = frozenset({"penguiflow"})
#: The project's own packages, which a reproduction must not touch.
PROJECT_PACKAGES = (
    "stm_conformance",
    "reference_impl",
    "stm_penguiflow",
    "stm_stores",
    "stm_redis",
)

SCRIPTS = sorted(FINDINGS.glob("*.py"))


def failing_requirements() -> set[str]:
    """The requirement IDs ``xfail.toml`` declares failing: table names and reason prefixes."""
    entries = tomllib.loads(XFAIL_FILE.read_text(encoding="utf-8"))
    ids = {name for name in entries if REQUIREMENT_ID.match(name)}
    for name, entry in entries.items():
        if not REQUIREMENT_ID.match(name):
            match = REASON_ID.match(entry["reason"])
            assert match, f"{name}: the reason must open with the requirement ID it fails"
            ids.add(match.group(1))
    return ids


def imported_modules(path: Path) -> set[str]:
    """The top-level names of every module ``path`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            names.add((node.module or "").partition(".")[0])
    return names


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_the_finding_reproduces(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    output = f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"[-3000:]
    assert done.returncode != 0, f"{script.name} no longer reproduces the defect:\n{output}"
    assert "AssertionError" in done.stderr, output
    assert f"AssertionError: {script.stem}:" in done.stderr, (
        f"the failed assertion must state the defect of {script.stem}:\n{output}"
    )


def test_every_failing_requirement_has_a_finding() -> None:
    failing = failing_requirements()
    found = {p.stem for p in SCRIPTS}
    assert failing, f"no failing requirement found in {XFAIL_FILE}"
    assert not failing - found, f"no docs/findings/<ID>.py for {sorted(failing - found)}"
    assert not found - failing, (
        f"findings for requirements xfail.toml does not list: {sorted(found - failing)}"
    )


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_the_finding_needs_penguiflow_alone(script: Path) -> None:
    text = script.read_text(encoding="utf-8")
    mentioned = [name for name in PROJECT_PACKAGES if name in text]
    assert not mentioned, f"{script.name} refers to this project's {mentioned}"
    foreign = imported_modules(script) - ALLOWED_IMPORTS - sys.stdlib_module_names
    assert not foreign, f"{script.name} imports {sorted(foreign)}: only penguiflow and the stdlib"
