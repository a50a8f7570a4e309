"""Installed but not asked for, the kit changes nothing about other pytest runs."""

from __future__ import annotations

import json

import pytest
from kit_support import RunPytest

MODULE_DUMP = """
import json
import sys


def pytest_sessionfinish(session):
    ours = {"stm_conformance", "stm_stores", "reference_impl"}
    names = sorted(m for m in sys.modules if m.split(".")[0] in ours)
    with open("modules.json", "w") as handle:
        json.dump(names, handle)
"""


def test_plain_run_imports_only_the_plugin_and_adds_no_items(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    pytester.makeconftest(MODULE_DUMP)
    pytester.makepyfile(test_plain="def test_ok():\n    pass\n")
    # A new interpreter, not ``run_pytest``'s fork of one that imported the kit already:
    # what this run imports is the point.
    result = pytester.runpytest_subprocess("-v")
    result.assert_outcomes(passed=1)
    assert result.parseoutcomes() == {"passed": 1}
    result.stdout.no_fnmatch_line("stm*")  # no header lines of the kit
    modules = json.loads((pytester.path / "modules.json").read_text())
    assert modules == ["stm_conformance", "stm_conformance.plugin"]


def test_options_are_listed_in_help(run_pytest: RunPytest) -> None:
    result = run_pytest("--help")
    result.stdout.fnmatch_lines(["*--stm-backend=NAME*", "*--stm-report=FILE*", "*stm_backend*"])
