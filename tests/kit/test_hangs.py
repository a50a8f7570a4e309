"""The suite ends every check against a backend that hangs, and says why and where.

Each module of ``tests/kit/hangs`` hangs the suite in its own way (a synchronous infinite
loop, ignored cancellation, ``add_turn`` awaiting the summarizer). The whole suite runs
against it in a subprocess, exactly as a backend author would run it, and must finish in
the module's time budget (``WALL_S``), fail ``FAILS``, fail ``CHECK`` with ``REASON`` and
the stack of the backend's code, and run every other check.

All run at the default settings (``--stm-timeout`` 30 s): none of these hangs waits for
the timeout, so each ``WALL_S`` is checked as promised to backend authors.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from kit_support import KIT_TESTS, run_suite

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


@pytest.mark.parametrize("name", hang_modules())
def test_suite_ends_every_check_of_a_hanging_backend(name: str, tmp_path: Path) -> None:
    module = _hang(name)
    started = time.monotonic()
    report, output = run_suite(tmp_path, f"hangs.{name}:provider")
    took = time.monotonic() - started
    tail = output[-3000:]
    assert report["backend"]["name"] == module.provider.name
    assert took <= module.WALL_S, f"the run took {took:.0f}s > {module.WALL_S}s\n{tail}"
    assert report["run"]["complete"], f"the run did not cover the whole suite\n{tail}"
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
