"""The provider example of docs/backend-authors.md runs exactly as written."""

from __future__ import annotations

import re

import pytest
from kit_support import DOCS, RunPytest


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
