"""``docs/reliability.md`` quotes the tests' own numbers of cases."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reliability.md"

#: (test file, constant): the doc must show the constant's value next to its name.
QUOTED = [
    ("tests/reliability/test_generated.py", "GENERATED_TURNS"),
    ("tests/reliability/test_generated.py", "GENERATED_RECORDS"),
    ("tests/reliability/test_chaos.py", "CHAOS_TURNS"),
    ("tests/reliability/test_chaos.py", "CHAOS_SEEDS"),
    ("tests/reliability/test_killed_writer.py", "KILLS"),
    ("tests/reliability/test_lost_replies.py", "LOST_REPLY_SEEDS"),
    ("tests/reliability/test_scale.py", "BIG_TURNS"),
    ("tests/reference/test_hostile_input.py", "BAD_TURNS"),
    ("tests/reference/test_hostile_input.py", "ODD_STORED_FIELDS"),
    ("tests/reference/test_hostile_input.py", "GENERATED_STORED_TURNS"),
    ("tests/session/test_session_persistence.py", "SESSIONS"),
]


def _module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_quoted_{Path(path).stem}", ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str((ROOT / path).parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str((ROOT / path).parent))
    return module


@pytest.mark.parametrize(("path", "name"), QUOTED, ids=[name for _, name in QUOTED])
def test_the_reliability_page_quotes_each_count_as_the_tests_have_it(path: str, name: str) -> None:
    value = getattr(_module(path), name)
    count = len(value) if isinstance(value, dict | list | tuple) else value
    lines = [line for line in DOC.read_text(encoding="utf-8").splitlines() if f"`{name}`" in line]
    assert lines, f"docs/reliability.md does not mention {name}"
    assert any(f"{count:,} " in line for line in lines), (
        f"docs/reliability.md quotes {name} without its value {count:,}: {lines}"
    )
