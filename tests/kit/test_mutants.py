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

The runs are started ahead, at collection, a few at once (``run_ahead``); these tests
judge them at the end of the session. A mutant's run runs only the checks that can reach
its change (``stm_impact``): a check that never calls a function the mutant replaces runs
the reference's code, which passes it (``test_reference_passes_everything``). What each
check calls is recorded from one more run of the reference, before the mutants' runs
start. ``STM_MUTANT_RUNS=full`` runs every check against every mutant instead.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from types import ModuleType
from typing import Any

import pytest
from kit_support import (
    KIT_TESTS,
    ROOMY_TIMEOUT,
    assert_passed_everything,
    failed_requirements,
    failing_checks,
    load_json,
)
from run_ahead import Batch, Ended, Job

from stm_conformance.capabilities import CAPABILITIES as SHARED_CAPABILITIES
from stm_conformance.requirements import load_spec

if str(KIT_TESTS) not in sys.path:
    sys.path.insert(0, str(KIT_TESTS))

from stm_mutants import mutant_modules, reference_provider

MUTANTS = mutant_modules()
#: Requirements of backends whose state is shared across instances: their mutants are of
#: the Redis backend on fakeredis, which declares every capability.
SHARED_ONLY = {"CON-002"}
# A time limit per check the load cannot reach (ROOMY_TIMEOUT): hangs are decided by the
# kit's own fast rules, and beside the other runs a check of 2 s alone once took 30 s and
# ended at the default limit, found stuck and blamed on its own requirement (SER-003, in
# two mutants' runs of one CI dry run). Half the default patience: a mutant's failing
# checks wait 2.5 s, not 5 s, for what never comes, and the reference's code behind every
# mutant reaches each state in milliseconds (test_reference_passes_everything runs at the
# same patience). Not less: the runs share two cores with each other and the other tests,
# and the tightest bound (``patient(1)`` for six add_turn calls) must hold on a starved
# process. One line per failure in the terminal: pytest's long tracebacks parse the source
# of every frame of every failure again, half the CPU of a run with many failures, and the
# JSON report judged here is the same with any traceback style. A run stuck in one test
# for 150 s (past the kit's bound of every check) prints every thread's stack into its
# output, which a judge that times out shows.
ARGS = (
    "--stm-patience=0.5",
    "--stm-hypothesis-profile=dev",
    "--stm-seed=20261123",
    ROOMY_TIMEOUT,
    "--tb=line",
    "-o",
    "faulthandler_timeout=150",
)


class SuiteMissedMutant(AssertionError):
    """The suite ran against a mutant without failing the requirement it breaks."""


def _mutant(name: str) -> ModuleType:
    return importlib.import_module(f"stm_mutants.{name}")


#: For mutants of the Redis backend on fakeredis, three times the default patience (and the
#: time limit of every run here): fakeredis runs each operation as a Lua script in this
#: process, five times the reference's CPU, and these runs share two cores with thirteen
#: others. At the defaults, a CI run failed both on WM-002: the differential check ran out
#: of its 30 s (25-30 s beside twelve busy processes here, where one run at the default
#: patience also failed WM-001 on 60 ``add_turn`` calls at once). With these margins, in
#: the same conditions, both failed CON-002 alone. Only failing checks wait their
#: patience, and these mutants fail one check.
SHARED_ARGS = (
    *(arg for arg in ARGS if not arg.startswith("--stm-patience=")),
    "--stm-patience=3",
)


#: The run of the reference that records what each check calls (``stm_impact``), in its
#: directory beside the mutants' runs. Traced, it takes three times the CPU of a plain run.
RECORD = Job(
    "reference-record", "reference", (*ARGS, "-p", "stm_impact", "--impact-record=impact.json")
)
#: Every check against every mutant (``STM_MUTANT_RUNS=full``), as a release is checked.
FULL = os.environ.get("STM_MUTANT_RUNS", "") == "full"
#: For the tests of the selection itself.
SELECTING = pytest.mark.skipif(FULL, reason="every mutant runs every check (STM_MUTANT_RUNS=full)")


def _job(name: str, *, every_check: bool = FULL) -> Job:
    module = _mutant(name)
    args = ARGS
    after = None
    if module.BREAKS in SHARED_ONLY:  # the Redis backend: no record speaks for it
        args = SHARED_ARGS
    elif not every_check:
        args = (*ARGS, "-p", "stm_impact", f"--impact-select=../{RECORD.name}/impact.json")
        after = RECORD
    slow = bool(getattr(module, "SLOW", None))
    return Job(name, f"stm_mutants.{name}:provider", args, slow=slow, after=after)


def _params() -> list[Any]:
    params = []
    for name in MUTANTS:
        gap = getattr(_mutant(name), "GAP", None)
        marks = [pytest.mark.suite_run(_job(name))]
        if gap:
            marks.append(
                pytest.mark.xfail(raises=SuiteMissedMutant, strict=True, reason=f"suite gap: {gap}")
            )
        params.append(pytest.param(name, marks=marks, id=name))
    return params


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
        # The reference's, or for a requirement only a shared backend has, fakeredis'.
        assert provider.capabilities == (
            SHARED_CAPABILITIES if module.BREAKS in SHARED_ONLY else reference_provider.capabilities
        ), name
        assert isinstance(getattr(module, "SLOW", ""), str), f"{name}: SLOW is a reason"


@pytest.mark.parametrize("name", _params())
def test_suite_catches_mutant(name: str, suite_result: Ended) -> None:
    module = _mutant(name)
    report, output = suite_result.report, suite_result.output
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


@pytest.mark.suite_run(Job("reference", "reference", ARGS))
def test_reference_passes_everything(suite_result: Ended) -> None:
    assert_passed_everything(suite_result.report, suite_result.output, "the reference backend")


@SELECTING
@pytest.mark.suite_run(RECORD)
def test_the_record_of_the_reference_covers_every_check(
    suite_result: Ended, suite_runs: Batch
) -> None:
    """The record the mutants' runs select from names every check the suite runs, each
    with the reference functions it called; a check that did not pass under the tracer
    is run against every mutant (its record may stop short)."""
    record = load_json(suite_runs.root / RECORD.name / "impact.json")
    checks = {check["nodeid"] for check in suite_result.report["checks"]}
    assert set(record["checks"]) == checks, "the record misses checks, or names others"
    assert set(record["not_passed"]) <= checks
    called = [keys for node, keys in record["checks"].items() if "test_differential" in node]
    assert all(any("DefaultShortTermMemory.add_turn" in key for key in keys) for keys in called)
    doors = {node for node, keys in record["checks"].items() if any("<kit>/" in k for k in keys)}
    assert any("test_key.py" in node for node in doors), "the kit's door to storage keys"


#: Mutants whose runs select part of the suite, each run a second time against every check:
#: a change reached in the full run only (through a path the record missed) shows here.
CROSS_CHECKED = (
    "ser005_hydrate_skips_turnless_record",  # 43 of 370 checks
    "wm002_turn_too_long_to_show_dropped",
    "bud003_blank_turns_not_counted_in_window",
    "cb004_degrade_alert_awaited_by_worker",
    "key002_user_id_lowercased",  # a storage key, reached through the kit's door to it
    "wm005_healthy_backlog_loaded_after_pending",  # data of its own, by a name nothing reads
)


def _every_check(name: str) -> Job:
    return dataclasses.replace(_job(name, every_check=True), name=f"{name}-every-check")


@SELECTING
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            name,
            marks=[pytest.mark.suite_run(_job(name)), pytest.mark.suite_run(_every_check(name))],
        )
        for name in CROSS_CHECKED
    ],
)
def test_a_selected_run_misses_no_failure_of_the_full_run(name: str, suite_runs: Batch) -> None:
    selected = suite_runs.result(name).report
    full = suite_runs.result(_every_check(name).name).report
    ran = {check["nodeid"] for check in selected["checks"]}  # deselected checks are not listed
    failed_in_full = {c["nodeid"] for c in full["checks"] if c["outcome"] in ("failed", "error")}
    assert failed_in_full, f"{name}: the full run failed no check"
    assert failed_in_full <= ran, f"not selected, failed in the full run: {failed_in_full - ran}"
    assert failed_requirements(selected) == failed_requirements(full)
    assert len(ran) < len(full["checks"]), f"{name}: every check was selected"
