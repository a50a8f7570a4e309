"""Meta-test: the conformance suite catches every mutant, on the requirement it breaks.

Each module of ``tests/kit/stm_mutants`` is a backend that breaks one requirement (``BREAKS``).
The suite runs against it in a subprocess, exactly as a backend author would run it
(``pytest --stm-backend=module:provider --stm-report=FILE``), restricted to the suite files
of that requirement's group (``SUITE_FILES``, optionally ``SELECT`` as ``-k``) to keep the
meta-test fast. The JSON report must show ``BREAKS`` as failed, and no failed requirement
outside ``BREAKS`` and the mutant's documented ``COLLATERAL``. The reference backend, run on
the whole suite, must pass everything.

A mutant with a ``GAP`` note breaks its requirement in a way no check detects yet (a known
gap of the suite, described by the note): its run is a strict expected failure, so adding
the missing check turns it into an unexpected pass until the note is removed.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import stm_conformance
from stm_conformance.requirements import load_spec

REPO = Path(__file__).resolve().parents[2]
#: Where ``stm_mutants`` is importable from, here and in the runs' subprocesses. Not a
#: ``tests.`` package path: an installed distribution may own a top-level ``tests``.
KIT_TESTS = Path(__file__).resolve().parent
if str(KIT_TESTS) not in sys.path:
    sys.path.insert(0, str(KIT_TESTS))

from stm_mutants import mutant_modules, reference_provider  # noqa: E402

SUITE_DIR = Path(stm_conformance.__file__).resolve().parent / "suite"
MUTANTS = mutant_modules()

#: Longest one conformance run may take before the meta-test gives up on it.
RUN_TIMEOUT_S = 300
#: Per-check deadline inside a run: a mutant that hangs a check fails it quickly.
CHECK_TIMEOUT_S = 8


class SuiteMissedMutant(AssertionError):
    """The suite ran against a mutant without failing the requirement it breaks."""


def _mutant(name: str) -> ModuleType:
    return importlib.import_module(f"stm_mutants.{name}")


def _params() -> list[Any]:
    params = []
    for name in MUTANTS:
        gap = getattr(_mutant(name), "GAP", None)
        marks = (
            [pytest.mark.xfail(raises=SuiteMissedMutant, strict=True, reason=f"suite gap: {gap}")]
            if gap
            else []
        )
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def _run_suite(tmp_path: Path, backend: str, args: list[str]) -> tuple[dict[str, Any], str]:
    """Run the suite in a subprocess from ``tmp_path``; the report and the output."""
    report = tmp_path / "r.json"
    # An empty ini file: the repository's own pytest settings must not leak into the run.
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    # Nothing of the outer run may leak in: PYTEST_ADDOPTS, PYTEST_PLUGINS, xdist's worker
    # variables, a configured STM_BACKEND.
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "STM_BACKEND"
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(KIT_TESTS), env.get("PYTHONPATH")]))
    command = [
        sys.executable,
        "-m",
        "pytest",
        f"--stm-backend={backend}",
        f"--stm-report={report}",
        "--stm-hypothesis-profile=ci",
        f"--stm-timeout={CHECK_TIMEOUT_S}",
        "-c",
        str(ini),
        "-q",
        "-p",
        "no:cacheprovider",
        *args,
    ]
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    output = f"$ {' '.join(command)}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert report.is_file(), f"the run wrote no report:\n{output[-6000:]}"
    return json.loads(report.read_text(encoding="utf-8")), output


def _failed(report: dict[str, Any]) -> set[str]:
    return {rid for rid, r in report["requirements"].items() if r["status"] == "fail"}


def _failing_checks(report: dict[str, Any]) -> str:
    lines = [
        f"  {c['nodeid']} {c['requirements']}: {(c['message'] or '').splitlines()[:1]}"
        for c in report["checks"]
        if c["outcome"] == "failed"
    ]
    return "\n".join(lines) or "  (none)"


def test_there_are_enough_mutants_and_each_is_well_formed() -> None:
    spec = load_spec()
    caught = [name for name in MUTANTS if not getattr(_mutant(name), "GAP", None)]
    assert len(caught) >= 15, caught
    names = set()
    for name in MUTANTS:
        module = _mutant(name)
        assert module.__doc__ and module.BREAKS in module.__doc__, f"{name}: docstring"
        assert module.BREAKS in spec, f"{name}: BREAKS={module.BREAKS!r} is not in the spec"
        assert module.BREAKS not in module.COLLATERAL, name
        assert set(module.COLLATERAL) <= set(spec.requirements), f"{name}: unknown collateral"
        assert all(isinstance(why, str) and why for why in module.COLLATERAL.values()), name
        assert module.SUITE_FILES, name
        for file in module.SUITE_FILES:
            assert (SUITE_DIR / file).is_file(), f"{name}: no suite file {file}"
        provider = module.provider
        assert provider.name.startswith("mutant-") and provider.name not in names, name
        names.add(provider.name)
        assert provider.capabilities == reference_provider.capabilities, name


@pytest.mark.parametrize("name", _params())
def test_suite_catches_mutant(name: str, tmp_path: Path) -> None:
    module = _mutant(name)
    args = [str(SUITE_DIR / file) for file in module.SUITE_FILES]
    if module.SELECT:
        args += ["-k", module.SELECT]
    report, output = _run_suite(tmp_path, f"stm_mutants.{name}:provider", args)
    assert report["backend"]["name"] == module.provider.name, "the mutant was not the backend"
    failed = _failed(report)
    details = f"failed requirements: {sorted(failed)}\nfailing checks:\n{_failing_checks(report)}"
    missed = module.BREAKS not in failed
    unexpected = failed - {module.BREAKS, *module.COLLATERAL}
    assert not unexpected, (
        f"{name} breaks {module.BREAKS}, but the suite failed {sorted(unexpected)} "
        f"(not documented as collateral){' and not ' + module.BREAKS if missed else ''}\n"
        f"{details}"
    )
    if missed:
        raise SuiteMissedMutant(
            f"the suite did not catch {name}: {module.BREAKS} did not fail\n{details}\n"
            f"{output[-4000:]}"
        )


def test_reference_passes_everything(tmp_path: Path) -> None:
    report, output = _run_suite(tmp_path, "reference", [])
    failed = _failed(report)
    assert report["run"]["exit_status"] == 0 and not failed, (
        f"the reference backend failed {sorted(failed)}\n{_failing_checks(report)}\n"
        f"{output[-4000:]}"
    )
    assert report["run"]["complete"], "the reference run did not cover the whole suite"
    assert report["summary"]["checks"]["failed"] == 0
