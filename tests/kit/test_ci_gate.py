"""``docs/examples/ci-gate.sh``, the shell gate of docs/ci-gate.md, gates as documented."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from kit_support import DOCS, ROOMY_TIMEOUT, RUN_TIMEOUT_S, clean_environment, load_json

SCRIPT = DOCS / "examples" / "ci-gate.sh"
GUIDE = DOCS / "ci-gate.md"


def gate(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[int, str]:
    """Run the script with bash from ``tmp_path``, as a CI job would; returns status and output.

    The environment is clean (no ``PYTEST_*``, ``STM_*`` or ``CI``) and ``python3`` is the
    interpreter running these tests; ``env`` comes on top, ``args`` go on to pytest.
    """
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    clean = clean_environment()
    clean["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), clean.get("PATH", "")])
    clean.update(env)
    done = subprocess.run(
        ["bash", str(SCRIPT), "-q", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    return done.returncode, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"[-4000:]


def test_the_guide_shows_the_script_verbatim() -> None:
    blocks = re.findall(r"^```sh\n(#!.*?)^```$", GUIDE.read_text("utf-8"), re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, "docs/ci-gate.md must show the script in one sh block"
    assert blocks[0] == SCRIPT.read_text("utf-8"), "docs/ci-gate.md and ci-gate.sh differ"


def test_a_reached_level_passes_the_gate(tmp_path: Path) -> None:
    status, output = gate(tmp_path, {"STM_GATE_NO_INSTALL": "1"}, ROOMY_TIMEOUT)
    assert status == 0, output
    report = load_json(tmp_path / "stm-report.json")
    assert report["backend"]["setting"] == "reference"
    assert report["hypothesis"] == {"profile": "ci", "seed": None}
    assert "Durable" in report["levels_reached"]
    assert report["run"]["exit_status"] == 0


def test_a_level_not_reached_fails_the_gate(tmp_path: Path) -> None:
    # Every check passes and the gate still fails. The keys' checks alone (a partial run
    # reaches no level) say so as well as the whole suite, in a fraction of its time.
    env = {"STM_GATE_NO_INSTALL": "1", "STM_GATE_LEVEL": "Distributed"}
    status, output = gate(tmp_path, env, "test_key.py")
    assert status == 1, output
    report = load_json(tmp_path / "stm-report.json")
    assert report["summary"]["checks"]["failed"] == 0
    assert report["summary"]["checks"]["passed"] > 0
    assert "Distributed" not in report["levels_reached"]
    assert "required level Distributed not reached" in output


def test_an_expected_failure_that_passes_fails_the_gate(tmp_path: Path) -> None:
    xfail = tmp_path / "stm-xfail.toml"
    xfail.write_text('["KEY-001"]\nreason = "fixed"\ncategory = "known_bug"\n', encoding="utf-8")
    env = {"STM_GATE_NO_INSTALL": "1", "STM_GATE_XFAIL": xfail.name}
    status, output = gate(tmp_path, env, "test_key.py")  # KEY-001's checks are there
    assert status == 1, output
    report = load_json(tmp_path / "stm-report.json")
    listed = [c for c in report["checks"] if c["xfail_category"] == "known_bug"]
    assert listed, output
    assert all(c["outcome"] == "failed" for c in listed)
    assert all(c["message"].startswith("[XPASS(strict)]") for c in listed)


def test_the_install_step(tmp_path: Path) -> None:
    """Without ``STM_GATE_KIT`` the script stops; with it, pip installs the kit and the project
    before pytest runs. A stand-in interpreter records the commands and does nothing."""
    status, output = gate(tmp_path, {})
    assert status == 4, output
    assert "set STM_GATE_KIT" in output
    log = tmp_path / "commands"
    stand_in = tmp_path / "python"
    stand_in.write_text(f'#!/bin/sh\necho "$*" >> {log}\n', encoding="utf-8")
    stand_in.chmod(0o755)
    status, output = gate(tmp_path, {"STM_GATE_KIT": "/kit", "STM_GATE_PYTHON": str(stand_in)})
    assert status == 0, output
    assert log.read_text("utf-8").splitlines() == [
        "-m pip install --quiet /kit .",
        "-m pytest --stm-backend=reference --stm-require-level=Durable "
        "--stm-report=stm-report.json --stm-hypothesis-profile=ci -q -p no:cacheprovider",
    ]
