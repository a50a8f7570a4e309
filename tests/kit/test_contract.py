"""The kit's contract: importable on its own, ``MemoryKey.composite()`` injective, and
configurations with impossible timings refused.

``composite()`` is the default storage key of every backend (``Provider.storage_key``), so
the kit tests it here as its own code; backends are checked for KEY-002 by the suite.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kit_support import DOCS, load_json

from stm_conformance.contract import MemoryKey, ShortTermMemoryConfig
from stm_conformance.suite import test_serialization as ser
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


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("retry_backoff_base_s", -1.0),
        ("retry_backoff_base_s", math.nan),
        ("degraded_retry_interval_s", math.nan),
        ("summarizer_timeout_s", 0.0),
        ("summarizer_timeout_s", math.nan),
        # Infinite: a failed memory would wait for good, and flush() with it (None, not
        # inf, is "no timeout").
        ("retry_backoff_base_s", math.inf),
        ("degraded_retry_interval_s", math.inf),
        ("summarizer_timeout_s", math.inf),
    ],
)
def test_impossible_timings_are_refused(name: str, value: float) -> None:
    # NaN compares false with every bound: a memory given it retried without pause.
    with pytest.raises(ValueError, match=name):
        ShortTermMemoryConfig(**{name: value})  # type: ignore[arg-type]
    ShortTermMemoryConfig(**{name: 0.5})  # type: ignore[arg-type]  # a good value passes
    ShortTermMemoryConfig(**{name: 2})  # type: ignore[arg-type]  # an int of seconds too


@pytest.mark.parametrize(
    "name", ["retry_backoff_base_s", "degraded_retry_interval_s", "summarizer_timeout_s"]
)
@pytest.mark.parametrize("value", [True, "5", None])
def test_a_time_of_another_type_is_refused(name: str, value: object) -> None:
    if value is None and name == "summarizer_timeout_s":
        assert ShortTermMemoryConfig(summarizer_timeout_s=None).summarizer_timeout_s is None
        return  # documented: no timeout
    with pytest.raises(TypeError, match=name):
        ShortTermMemoryConfig(**{name: value})  # type: ignore[arg-type]


def test_a_token_estimator_that_cannot_be_called_is_refused() -> None:
    with pytest.raises(TypeError, match="token_estimator"):
        ShortTermMemoryConfig(token_estimator="cl100k_base")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "error"), [(7, TypeError), (math.nan, TypeError), ("gpt-\ud800", ValueError)]
)
def test_a_summarizer_model_no_saved_state_could_hold_is_refused(
    model: object, error: type[Exception]
) -> None:
    # The config's snapshot in to_dict() carries it: it must be text that JSON can hold.
    with pytest.raises(error, match="summarizer_model"):
        ShortTermMemoryConfig(summarizer_model=model)  # type: ignore[arg-type]
    assert ShortTermMemoryConfig(summarizer_model="gpt-4o-mini ü").summarizer_model


def test_the_suites_version_2_fields_are_the_schemas() -> None:
    """SER-001 and SER-003 judge version-2 states by field lists the kit holds (it does not
    ship the schema): they are ``docs/memory-state.schema.json``'s, object by object."""
    schema = load_json(DOCS / "memory-state.schema.json")
    defs = schema["$defs"]
    objects = {
        "state": (schema, ser.V2_STATE_FIELDS, ser.V2_STATE_OPTIONAL),
        "turn": (defs["TurnV2"], ser.V2_TURN_FIELDS, ser.V2_TURN_OPTIONAL),
        "digest": (defs["DigestV2"], ser.V2_DIGEST_FIELDS, ser.V2_DIGEST_OPTIONAL),
        "key": (defs["KeyV2"], ser.V2_KEY_FIELDS, ()),
    }
    for name, (definition, required, optional) in objects.items():
        assert definition["additionalProperties"] is False, name
        assert set(required) == set(definition["required"]), name
        assert set(required) | set(optional) == set(definition["properties"]), name
        assert not set(required) & set(optional), name
