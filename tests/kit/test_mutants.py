"""Meta-test: the conformance suite catches every mutant, on the requirement it breaks.

Each module of ``tests/kit/stm_mutants`` is a backend that breaks one requirement
(``BREAKS``). The whole suite runs against it in a subprocess, exactly as a backend author
would run it (``pytest --stm-backend=module:provider --stm-report=FILE``). The JSON report
must show ``BREAKS`` as failed and no other failed requirement except the mutant's
documented ``COLLATERAL`` (each with the reason it follows from the one bug). The reference
backend must pass everything.

A mutant with a ``GAP`` note breaks its requirement in a way no check detects yet (a known
gap of the suite, described by the note): its run is a strict expected failure, so adding
the missing check turns it into an unexpected pass until the note is removed.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from kit_support import (
    KIT_TESTS,
    RUN_TIMEOUT_S,
    failed_requirements,
    failing_checks,
    finish_suite,
    run_suite,
    start_suite,
)
from suite_runner import SuiteRun

from stm_conformance.requirements import load_spec

if str(KIT_TESTS) not in sys.path:
    sys.path.insert(0, str(KIT_TESTS))

from stm_mutants import mutant_modules, reference_provider

MUTANTS = mutant_modules()
PATIENCE = ["--stm-patience=0.25", "--stm-hypothesis-profile=dev", "--stm-seed=20261123"]
#: The mutants are split in this many groups; under ``--dist loadgroup`` each group runs on
#: one worker, which starts its group's suite runs ahead, a few at once (``AT_ONCE``).
GROUPS, AT_ONCE = 2, 2


class SuiteMissedMutant(AssertionError):
    """The suite ran against a mutant without failing the requirement it breaks."""


def _mutant(name: str) -> ModuleType:
    return importlib.import_module(f"stm_mutants.{name}")


def _group(name: str) -> int:
    return MUTANTS.index(name) % GROUPS


def _params() -> list[Any]:
    params = []
    for name in MUTANTS:
        gap = getattr(_mutant(name), "GAP", None)
        marks = [pytest.mark.xdist_group(f"mutants-{_group(name)}")]
        if gap:
            marks.append(
                pytest.mark.xfail(raises=SuiteMissedMutant, strict=True, reason=f"suite gap: {gap}")
            )
        params.append(pytest.param(name, marks=marks, id=name))
    return params


class _Runs:
    """The suite runs of the mutants, started ahead of the tests that judge them: a run
    mostly waits on timers, so ``AT_ONCE`` of them share the cores well."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.queued: list[str] = []
        self.running: dict[str, SuiteRun] = {}
        self.ended: dict[str, tuple[dict[str, Any], str]] = {}
        # Every mutant ever started, including those already judged (popped from ``ended``):
        # a run is started once, whatever order the tests ask for them in.
        self.started: set[str] = set()

    def _start(self, name: str) -> None:
        self.started.add(name)
        cwd = self.root / name
        cwd.mkdir()
        self.running[name] = start_suite(cwd, f"stm_mutants.{name}:provider", PATIENCE)

    def result(self, name: str) -> tuple[dict[str, Any], str]:
        if name not in self.started:
            if name in self.queued:
                self.queued.remove(name)
            self._start(name)  # the one asked for first
            self.queued += [
                m
                for m in MUTANTS
                if _group(m) == _group(name) and m not in self.started and m not in self.queued
            ]
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while name not in self.ended:
            for started, run in list(self.running.items()):
                if run.done():
                    self.ended[started] = finish_suite(self.running.pop(started))
            while self.queued and len(self.running) < AT_ONCE:
                self._start(self.queued.pop(0))
            if name in self.running and time.monotonic() > deadline:
                return finish_suite(self.running.pop(name))  # kills it, TimeoutError
            time.sleep(0.05)
        return self.ended.pop(name)


class _FakeRun:
    def __init__(self, name: str) -> None:
        self.name = name

    def done(self) -> bool:
        return True


def test_runs_start_each_mutant_once_in_any_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []

    def start(cwd: Path, backend: str, args: list[str]) -> _FakeRun:
        started.append(cwd.name)
        return _FakeRun(cwd.name)

    monkeypatch.setattr(sys.modules[__name__], "start_suite", start)
    monkeypatch.setattr(sys.modules[__name__], "finish_suite", lambda run: ({"n": run.name}, ""))
    runs = _Runs(tmp_path)
    group = [m for m in MUTANTS if _group(m) == 0]
    # Judged out of order: a mutant asked for after others were judged must not restart them.
    order = group[len(group) // 2 :] + group[: len(group) // 2]
    assert [runs.result(name)[0]["n"] for name in order] == order
    assert sorted(started) == sorted(group) and len(started) == len(set(started))


@pytest.fixture(scope="module")
def mutant_runs(tmp_path_factory: pytest.TempPathFactory) -> _Runs:
    return _Runs(tmp_path_factory.mktemp("mutants"))


def test_there_are_enough_mutants_and_each_is_well_formed() -> None:
    spec = load_spec()
    caught = [name for name in MUTANTS if not getattr(_mutant(name), "GAP", None)]
    assert len(caught) >= 80, f"{len(caught)} mutants caught; at least 80 spread over the groups"
    names = set()
    for name in MUTANTS:
        module = _mutant(name)
        assert module.__doc__ and module.BREAKS in module.__doc__, f"{name}: docstring"
        assert module.BREAKS in spec, f"{name}: BREAKS={module.BREAKS!r} is not in the spec"
        assert module.BREAKS not in module.COLLATERAL, name
        assert set(module.COLLATERAL) <= set(spec.requirements), f"{name}: unknown collateral"
        assert all(isinstance(why, str) and why for why in module.COLLATERAL.values()), name
        provider = module.provider
        assert provider.name.startswith("mutant-") and provider.name not in names, name
        names.add(provider.name)
        assert provider.capabilities == reference_provider.capabilities, name


@pytest.mark.parametrize("name", _params())
def test_suite_catches_mutant(name: str, mutant_runs: _Runs) -> None:
    module = _mutant(name)
    # At the default --stm-timeout: hangs are decided by the kit's own fast rules, and a
    # loaded machine must not turn a slow differential run into a timeout. A quarter of
    # the default patience: a mutant's failing checks wait 1.25 s, not 5 s, for what never
    # comes, and the reference's code behind every mutant reaches each state in
    # milliseconds (test_reference_passes_everything runs at the same patience).
    report, output = mutant_runs.result(name)
    assert report["backend"]["name"] == module.provider.name, "the mutant was not the backend"
    failed = failed_requirements(report)
    details = f"failed requirements: {sorted(failed)}\nfailing checks:\n{failing_checks(report)}"
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
    report, output = run_suite(tmp_path, "reference", PATIENCE)
    failed = failed_requirements(report)
    assert report["run"]["exit_status"] == 0 and not failed, (
        f"the reference backend failed {sorted(failed)}\n{failing_checks(report)}\n{output[-4000:]}"
    )
    assert report["run"]["complete"], "the reference run did not cover the whole suite"
    assert report["summary"]["checks"]["failed"] == 0
