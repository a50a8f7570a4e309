"""Shared constants and helpers of the kit's tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SCHEMA_PATH = DOCS / "report.schema.json"

#: Where ``stm_mutants`` and ``stm_restricted`` are importable from, here and in the
#: subprocesses of suite runs. Not a ``tests.`` package path: an installed distribution may
#: own a top-level ``tests`` package.
KIT_TESTS = Path(__file__).resolve().parent
#: Longest one conformance run may take before a meta-test gives up on it.
RUN_TIMEOUT_S = 300

#: ``run_pytest(*args)``: pytest in a subprocess, in the scratch directory.
RunPytest = Callable[..., pytest.RunResult]


def load_json(path: Path) -> Any:
    """Parse a JSON file."""
    return json.loads(path.read_text(encoding="utf-8"))


def validate_report(report: Any) -> None:
    """Fail unless ``report`` is valid against ``docs/report.schema.json``."""
    import jsonschema

    schema = load_json(SCHEMA_PATH)
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = sorted(validator.iter_errors(report), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def clean_environment() -> dict[str, str]:
    """This process's environment without what would leak into a nested run: ``PYTEST_*``,
    ``STM_*`` and ``CI`` (which picks the hypothesis profile)."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "STM_")) and k != "CI"
    }


def run_suite(
    tmp_path: Path,
    backend: str,
    args: list[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], str]:
    """Run the suite as a backend author would, in a subprocess from ``tmp_path``.

    Returns the JSON report and the output. Nothing of the outer run leaks in:
    ``PYTEST_*`` and ``STM_*`` variables are dropped and an empty ini file is used.
    """
    report = tmp_path / "r.json"
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    clean = clean_environment()
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(KIT_TESTS), clean.get("PYTHONPATH")]))
    clean.update(env or {})
    command = [
        sys.executable,
        "-m",
        "pytest",
        f"--stm-backend={backend}",
        f"--stm-report={report}",
        "--stm-hypothesis-profile=ci",
        "-c",
        str(ini),
        "-q",
        "-p",
        "no:cacheprovider",
        *(args or []),
    ]
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    output = f"$ {' '.join(command)}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert report.is_file(), f"the run wrote no report:\n{output[-6000:]}"
    return load_json(report), output


def failed_requirements(report: Mapping[str, Any]) -> set[str]:
    """The requirement IDs a report shows as failed."""
    return {rid for rid, r in report["requirements"].items() if r["status"] == "fail"}


def failing_checks(report: Mapping[str, Any]) -> str:
    """One line per failed check: node ID, blamed requirement, first line of the message."""
    lines = [
        f"  {c['nodeid']} blamed={c['blamed']}: {(c['message'] or '').splitlines()[:1]}"
        for c in report["checks"]
        if c["outcome"] == "failed"
    ]
    return "\n".join(lines) or "  (none)"
