"""The classification of surviving mutants by ``mutation_report.py``."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def _report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_report", HERE / "mutation_report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_report"] = module
    spec.loader.exec_module(module)
    return module


SOURCE = """
def x_f__mutmut_orig(a):
    if a > 1:
        raise ValueError("too big")
    logger.info("a is %s", a)
    return a + 1

def x_f__mutmut_1(a):
    if a > 1:
        raise ValueError("XXtoo bigXX")
    logger.info("a is %s", a)
    return a + 1

def x_f__mutmut_2(a):
    if a > 1:
        raise ValueError("too big")
    logger.info("XXa is %sXX", a)
    return a + 1

def x_f__mutmut_3(a):
    if a >= 1:
        raise ValueError("too big")
    logger.info("a is %s", a)
    return a + 1

def x_f__mutmut_4(a):
    if a > 1:
        raise ValueError("too big")
    logger.info("a is %s", a)
    return a + 2
"""


def test_survivors_are_classified_by_what_they_change(tmp_path: Path) -> None:
    report = _report()
    path = tmp_path / "mutants" / "reference_impl" / "m.py"
    path.parent.mkdir(parents=True)
    path.write_text(textwrap.dedent(SOURCE), encoding="utf-8")
    mutants = [report.Mutant(f"reference_impl.m.x_f__mutmut_{n}", "survived") for n in (1, 2, 3, 4)]
    mutants.append(report.Mutant("reference_impl.m.x_f__mutmut_1", "killed"))
    equivalents = [{"function": "m.f", "removed": "return a + 1", "reason": "why"}]
    report.classify(mutants, tmp_path, equivalents)
    verdicts = [(m.verdict, m.reason) for m in mutants]
    assert verdicts == [
        ("message", "changes only an exception's message"),
        ("message", "changes only what is logged"),
        ("open", ""),
        ("listed", "why"),
        ("killed", ""),
    ]
    assert mutants[2].removed == "if a > 1:" and mutants[2].added == "if a >= 1:"
    killed, counted, percent = report.score(mutants)
    assert (killed, counted) == (1, 2) and percent == 50.0
    region = report.render(mutants, 60.0)
    assert "**Mutation score: 50.0%**" in region and "`if a > 1:` → `if a >= 1:`" in region


def test_a_survivor_outside_the_suite_names_its_killer_and_counts_against_the_score(
    tmp_path: Path,
) -> None:
    report = _report()
    path = tmp_path / "mutants" / "reference_impl" / "m.py"
    path.parent.mkdir(parents=True)
    path.write_text(textwrap.dedent(SOURCE), encoding="utf-8")
    mutants = [report.Mutant(f"reference_impl.m.x_f__mutmut_{n}", "survived") for n in (3, 4)]
    outside = [
        {"function": "m.f", "removed": "if a > 1:", "reason": "never given", "killed_by": "t.py"}
    ]
    report.classify(mutants, tmp_path, [], outside)
    assert [(m.verdict, m.reason) for m in mutants] == [
        ("outside", "never given (killed by `t.py`)"),
        ("open", ""),
    ]
    assert report.score(mutants)[:2] == (0, 2)
    region = report.render(mutants, None)
    assert "outside the suite's reach (1)" in region and "killed by `t.py`" in region
