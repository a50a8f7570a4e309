"""Shared constants and helpers of the kit's tests."""

from __future__ import annotations

import atexit
import json
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from suite_runner import SuiteRun, Zygote

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SCHEMA_PATH = DOCS / "report.schema.json"

#: Where ``stm_mutants`` and ``stm_restricted`` are importable from, here and in the
#: subprocesses of suite runs. Not a ``tests.`` package path: an installed distribution may
#: own a top-level ``tests`` package.
KIT_TESTS = Path(__file__).resolve().parent
#: Longest one conformance run may take before a meta-test gives up on it: a net for a run
#: that never ends, not a bound any test asserts. Beside fourteen other runs on two cores,
#: those against the Redis backend on fakeredis took up to 241 s.
RUN_TIMEOUT_S = 600
#: The time limit per check of every whole-suite run of the meta-tests (passing, broken
#: and hanging backends alike), which no check of theirs comes near. They share two cores
#: with fourteen other runs and the rest of the tests, where checks of 2 s alone ran out
#: of the default 30 s; what they test is the verdict, not the machine's speed.
ROOMY_TIMEOUT = "--stm-timeout=120"

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


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()  # the batch of runs (``run_ahead``) starts from a thread


def zygote() -> Zygote:
    """This process's zygote (``suite_runner``), started on first use."""
    global _zygote
    with _zygote_lock:
        if _zygote is None:
            _zygote = Zygote(_suite_env(None))
            atexit.register(_zygote.close)
        return _zygote


def _suite_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    clean = clean_environment()
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(KIT_TESTS), clean.get("PYTHONPATH")]))
    clean.update(extra or {})
    return clean


def start_suite(
    tmp_path: Path,
    backend: str,
    args: list[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> SuiteRun:
    """Start the suite as a backend author would run it, from ``tmp_path``, and return at
    once; :func:`finish_suite` waits for it. The run is forked from a process that has
    imported everything already (``suite_runner``), with an environment and ini file of
    its own: ``PYTEST_*`` and ``STM_*`` variables of the outer run are dropped and an empty
    ini file is used."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    command = [
        f"--stm-backend={backend}",
        f"--stm-report={tmp_path / 'r.json'}",
        "--stm-hypothesis-profile=ci",
        "-c",
        str(tmp_path / "pytest.ini"),
        "-q",
        "-p",
        "no:cacheprovider",
        *(args or []),
    ]
    return zygote().start(tmp_path, command, _suite_env(env), [str(KIT_TESTS)])


def finish_suite(run: SuiteRun, timeout_s: float = RUN_TIMEOUT_S) -> tuple[dict[str, Any], str]:
    """Wait for a run :func:`start_suite` started: its JSON report and output."""
    _, output = run.wait(timeout_s)
    report = run.cwd / "r.json"
    assert report.is_file(), f"the run wrote no report:\n{output[-6000:]}"
    return load_json(report), output


def run_suite(
    tmp_path: Path,
    backend: str,
    args: list[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], str]:
    """Run the suite as a backend author would, from ``tmp_path``; the JSON report and the
    output (see :func:`start_suite`)."""
    return finish_suite(start_suite(tmp_path, backend, args, env))


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


def assert_passed_everything(report: Mapping[str, Any], output: str, who: str) -> None:
    """A whole run of the suite against ``who`` passed every check it ran, and ran them all."""
    failed = failed_requirements(report)
    assert report["run"]["exit_status"] == 0 and not failed, (
        f"{who} failed {sorted(failed)}\n{failing_checks(report)}\n{output[-4000:]}"
    )
    assert report["run"]["complete"], f"the run against {who} did not cover the whole suite"
    assert report["summary"]["checks"]["failed"] == 0
