"""The provider example of docs/backend-authors.md runs exactly as written."""

from __future__ import annotations

import dataclasses
import re

import pytest
from kit_support import DOCS, RunPytest

from reference_impl import MemoryBudget, MemoryIsolation, ShortTermMemoryConfig
from stm_conformance import Provider


def example() -> str:
    text = (DOCS / "backend-authors.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, "backend-authors.md must hold exactly one python example"
    return str(blocks[0])


def test_example_is_short() -> None:
    assert len(example().splitlines()) <= 25


def test_example_provider_passes_its_probes(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    (pytester.path / "my_backend_stm.py").write_text(example(), encoding="utf-8")
    result = run_pytest("--stm-backend=my_backend_stm:provider", "-k", "probe", "-rs")
    result.stdout.fnmatch_lines(
        [
            "stm backend: my-backend = my_backend_stm:provider (from cli: my_backend_stm:provider)",
            "stm capabilities declared: callbacks, rolling_summary, serialization, truncation",
        ]
    )
    # One probe per capability: the four declared pass, the other three are skipped.
    result.assert_outcomes(passed=4, skipped=3)


def guide() -> str:
    return (DOCS / "backend-authors.md").read_text(encoding="utf-8")


def table_row(text: str, name: str) -> str:
    starts = (f"| `{name}`", f"| `{name}(")
    rows = [line for line in text.splitlines() if line.startswith(starts)]
    assert rows, f"backend-authors.md has no table row for {name!r}"
    return rows[0]


def documented_default(value: object) -> str:
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value}`"


@pytest.mark.parametrize(
    "cls",
    [ShortTermMemoryConfig, MemoryBudget, MemoryIsolation],
    ids=lambda cls: cls.__name__,
)
def test_guide_documents_every_config_field_with_its_default(cls: type) -> None:
    text = guide()
    for field in dataclasses.fields(cls):
        row = table_row(text, field.name)
        if field.default is not dataclasses.MISSING:
            assert documented_default(field.default) in row, (field.name, row)
        else:
            assert f"`{field.type}()`" in row or f"{field.type}()" in row, (field.name, row)


def test_guide_documents_every_provider_field() -> None:
    text = guide()
    for field in dataclasses.fields(Provider):
        table_row(text, field.name)


def test_guide_documents_every_option(run_pytest: RunPytest) -> None:
    help_text = run_pytest("--help").stdout.str()
    options = set(re.findall(r"--stm-[a-z-]+", help_text))
    ini_names = set(re.findall(r"^  (stm_[a-z_]+) ", help_text, re.MULTILINE))
    assert {"--stm-backend", "--stm-suite", "--stm-timeout"} <= options
    assert ini_names == {
        "stm_backend",
        "stm_report",
        "stm_xfail",
        "stm_require_level",
        "stm_timeout",
        "stm_patience",
    }
    text = guide()
    missing = sorted(name for name in options | ini_names if f"`{name}" not in text)
    assert not missing, f"backend-authors.md does not mention {missing}"
