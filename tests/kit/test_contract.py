"""The kit's contract: importable on its own, and ``MemoryKey.composite()`` injective.

``composite()`` is the default storage key of every backend (``Provider.storage_key``), so
the kit tests it here as its own code; backends are checked for KEY-002 by the suite.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stm_conformance.contract import MemoryKey
from stm_conformance.suite.test_key import ADVERSARIAL_KEYS

PART = st.lists(st.sampled_from(["a", ":", "%", "3", "A", "é", "e\u0301", "🦜"]), max_size=6).map(
    "".join
)


def test_the_contract_imports_without_pytest_or_the_reference() -> None:
    code = (
        "import sys; import stm_conformance.contract, stm_conformance.model; "
        "bad = {'pytest', 'reference_impl', 'hypothesis'} & set(sys.modules); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", list(ADVERSARIAL_KEYS))
def test_adversarial_pairs_get_distinct_composites(name: str) -> None:
    first, second = (MemoryKey(*parts) for parts in ADVERSARIAL_KEYS[name])
    assert first.composite() != second.composite()


@given(a=st.tuples(PART, PART, PART), b=st.tuples(PART, PART, PART))
def test_composite_is_injective(a: tuple[str, str, str], b: tuple[str, str, str]) -> None:
    assert (MemoryKey(*a).composite() == MemoryKey(*b).composite()) == (a == b)


def test_unencodable_or_non_string_parts_are_rejected() -> None:
    with pytest.raises(ValueError):
        MemoryKey("t", "u", "\ud800")
    with pytest.raises(TypeError):
        MemoryKey("t", "u", 42)  # type: ignore[arg-type]
