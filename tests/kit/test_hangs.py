"""The suite ends every check against a backend that hangs, and says why and where.

Each module of ``tests/kit/hangs`` hangs the suite in its own way (a synchronous infinite
loop, ignored cancellation, ``add_turn`` awaiting the summarizer). The whole suite runs
against it in a subprocess, exactly as a backend author would run it, and must finish in
the module's time budget (``WALL_S``), fail ``FAILS``, fail ``CHECK`` with ``REASON`` and
the stack of the backend's code, and run every other check.

All run at the default settings but for the time limit per check, ``--stm-timeout=120``
(``kit_support.ROOMY_TIMEOUT``), which the load of the project's tests cannot bring a check
to: the promise to backend authors (``docs/backend-authors.md``, section 14) is that a
hang is decided by the kit's own rules, sooner than the time limit, and no check of these
runs may end at it. (At the default 30 s one did: a hanging backend's differential check,
1.6 s alone, beside fourteen other runs.) ``WALL_S`` only bounds the whole run, with room
for a machine shared with the other runs.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

import pytest
from kit_support import KIT_TESTS, ROOMY_TIMEOUT
from run_ahead import Ended, Job

if str(KIT_TESTS) not in sys.path:
    sys.path.insert(0, str(KIT_TESTS))

from hangs import hang_modules


def _hang(name: str) -> ModuleType:
    return importlib.import_module(f"hangs.{name}")


def test_every_hanging_backend_is_well_formed() -> None:
    from stm_conformance._deadline import AWAITED_FOREVER, BLOCKED
    from stm_conformance.requirements import load_spec

    spec = load_spec()
    names = hang_modules()
    assert len(names) >= 3, names
    for name in names:
        module = _hang(name)
        assert module.__doc__ and module.FAILS in module.__doc__, name
        assert module.FAILS in spec, name
        assert module.REASON in (AWAITED_FOREVER, BLOCKED), name
        assert module.CHECK.startswith("test_") and module.WALL_S > 0, name
        assert module.provider.name.startswith("hang-"), name


def _params() -> list[Any]:
    from stm_conformance._deadline import AWAITED_FOREVER

    # Started ahead (``run_ahead``). A backend that awaits forever makes its run wait on
    # the kit's time limits almost throughout: it is not counted among the runs using CPU.
    # One that blocks the loop spins a core until the watchdog stops it.
    params = []
    for name in hang_modules():
        idle = _hang(name).REASON == AWAITED_FOREVER
        job = Job(f"hang-{name}", f"hangs.{name}:provider", (ROOMY_TIMEOUT,), idle=idle, slow=True)
        params.append(pytest.param(name, marks=pytest.mark.suite_run(job)))
    return params


@pytest.mark.parametrize("name", _params())
def test_suite_ends_every_check_of_a_hanging_backend(name: str, suite_result: Ended) -> None:
    from stm_conformance._deadline import CHECK_LIMIT

    module = _hang(name)
    report, output, took = suite_result.report, suite_result.output, suite_result.took_s
    tail = output[-3000:]
    assert report["backend"]["name"] == module.provider.name
    assert took <= module.WALL_S, f"the run took {took:.0f}s > {module.WALL_S}s\n{tail}"
    assert report["run"]["complete"], f"the run did not cover the whole suite\n{tail}"
    waited = [c["nodeid"] for c in report["checks"] if CHECK_LIMIT in (c["message"] or "")]
    assert not waited, f"checks that waited out --stm-timeout, not decided sooner: {waited}"
    failed = {rid for rid, r in report["requirements"].items() if r["status"] == "fail"}
    assert module.FAILS in failed, f"{module.FAILS} did not fail: {sorted(failed)}\n{tail}"
    messages = [
        c["message"] or ""
        for c in report["checks"]
        if c["outcome"] == "failed" and c["nodeid"].split("::")[-1].startswith(module.CHECK)
    ]
    assert messages, f"{module.CHECK} did not fail\n{tail}"
    message = messages[0]
    assert module.REASON in message, message
    assert f"hangs/{name}.py" in message and 'File "' in message, f"no stack:\n{message}"
    counts = report["summary"]["checks"]
    assert counts["passed"] >= 50, f"the other checks did not run: {counts}\n{tail}"
