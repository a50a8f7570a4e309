"""MemoryKey, its storage key, and key resolution from ``tool_context`` (spec group KEY)."""

from __future__ import annotations

import inspect
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from reference_impl import MemoryIsolation, MemoryKey, extract_path, resolve_memory_key
from reference_impl.types import MAX_KEY_COMPONENT_LENGTH

# Components biased towards the separator, the escape character and what they escape to.
_tricky = st.text(alphabet=st.sampled_from([":", "%", "3", "A", "a", "2", "5", "\\", "é", "🐧"]))
_component = st.one_of(_tricky, st.text(max_size=30), st.sampled_from(["", ":", "%", "%3A", "%25"]))
_key_parts = st.tuples(_component, _component, _component)


def _unescape(part: str) -> str:
    return part.replace("%3A", ":").replace("%25", "%")


# ------------------------------------------------------------------------ composite


@pytest.mark.requirement("KEY-002")
@settings(max_examples=300, deadline=None)
@given(first=_key_parts, second=_key_parts)
def test_distinct_keys_have_distinct_composites(
    first: tuple[str, str, str], second: tuple[str, str, str]
) -> None:
    assume(first != second)
    assert MemoryKey(*first).composite() != MemoryKey(*second).composite()


@pytest.mark.requirement("KEY-002")
@settings(max_examples=200, deadline=None)
@given(parts=_key_parts)
def test_composite_decodes_back_to_its_components(parts: tuple[str, str, str]) -> None:
    composite = MemoryKey(*parts).composite()
    escaped = composite.split(":")
    assert len(escaped) == 3
    assert tuple(_unescape(p) for p in escaped) == parts


@pytest.mark.requirement("KEY-002")
@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("a:b", "c", "d"), ("a", "b:c", "d")),
        (("a", "b:c", "d"), ("a", "b", "c:d")),
        (("a%3Ab", "c", "d"), ("a:b", "c", "d")),
        (("%", "", ""), ("%25", "", "")),
        (("", ":", ""), (":", "", "")),
    ],
)
def test_known_separator_collisions_are_kept_apart(
    first: tuple[str, str, str], second: tuple[str, str, str]
) -> None:
    assert MemoryKey(*first).composite() != MemoryKey(*second).composite()


@pytest.mark.requirement("KEY-002")
def test_plain_keys_read_as_in_penguiflow() -> None:
    assert MemoryKey("acme", "u-1", "s-9").composite() == "acme:u-1:s-9"


@pytest.mark.requirement("KEY-002")
@pytest.mark.parametrize("field", ["tenant_id", "user_id", "session_id"])
@pytest.mark.parametrize(
    "bad",
    ["\ud800", "ok\udfffok", "x" * (MAX_KEY_COMPONENT_LENGTH + 1)],
    ids=["lone-high", "lone-low", "too-long"],
)
def test_unencodable_or_too_long_components_raise_value_error(field: str, bad: str) -> None:
    parts = {"tenant_id": "t", "user_id": "u", "session_id": "s", field: bad}
    with pytest.raises(ValueError):
        MemoryKey(**parts)


@pytest.mark.requirement("KEY-002")
def test_longest_accepted_component_is_accepted() -> None:
    longest = "é" * MAX_KEY_COMPONENT_LENGTH
    assert MemoryKey(longest, "u", "s").composite().startswith(longest)


@pytest.mark.requirement("KEY-002")
@pytest.mark.parametrize("field", ["tenant_id", "user_id", "session_id"])
@pytest.mark.parametrize("bad", [None, 1, b"bytes", ["s"]], ids=repr)
def test_non_string_components_raise_type_error(field: str, bad: Any) -> None:
    parts: dict[str, Any] = {"tenant_id": "t", "user_id": "u", "session_id": "s", field: bad}
    with pytest.raises(TypeError):
        MemoryKey(**parts)


# ------------------------------------------------------------------------ resolution

ISOLATION = MemoryIsolation()


@pytest.mark.requirement("KEY-003")
def test_explicit_key_wins_over_tool_context() -> None:
    explicit = MemoryKey("t-explicit", "u-explicit", "s-explicit")
    context = {"tenant_id": "t-ctx", "user_id": "u-ctx", "session_id": "s-ctx"}
    assert resolve_memory_key(ISOLATION, memory_key=explicit, tool_context=context) is explicit


@pytest.mark.requirement("KEY-003")
def test_explicit_key_must_be_a_memory_key() -> None:
    with pytest.raises(TypeError):
        resolve_memory_key(ISOLATION, memory_key=("t", "u", "s"))  # type: ignore[arg-type]


@pytest.mark.requirement("KEY-004")
def test_parts_resolve_from_a_tool_context_mapping() -> None:
    context = {"tenant_id": "acme", "user_id": "alice", "session_id": "s-1", "other": 1}
    assert resolve_memory_key(ISOLATION, tool_context=context) == MemoryKey("acme", "alice", "s-1")


@pytest.mark.requirement("KEY-004")
def test_parts_resolve_through_nested_dotted_paths_of_mappings_and_attributes() -> None:
    isolation = MemoryIsolation(
        tenant_key="org.id", user_key="auth.user.id", session_key="request.session.id"
    )
    context = {
        "org": SimpleNamespace(id="acme"),
        "auth": {"user": {"id": "alice"}},
        "request": SimpleNamespace(session={"id": "s-1"}),
    }
    assert resolve_memory_key(isolation, tool_context=context) == MemoryKey("acme", "alice", "s-1")


@pytest.mark.requirement("KEY-004")
def test_parts_resolve_from_an_attributes_object() -> None:
    context = SimpleNamespace(tenant_id="acme", user_id="alice", session_id="s-1")
    assert resolve_memory_key(ISOLATION, tool_context=context) == MemoryKey("acme", "alice", "s-1")


@pytest.mark.requirement("KEY-004")
def test_llm_context_is_not_even_a_parameter() -> None:
    assert "llm_context" not in inspect.signature(resolve_memory_key).parameters
    with pytest.raises(TypeError):
        resolve_memory_key(  # type: ignore[call-arg]
            ISOLATION, llm_context={"tenant_id": "t", "user_id": "u", "session_id": "s"}
        )


@pytest.mark.requirement("KEY-004", "KEY-006")
def test_nothing_resolves_without_tool_context() -> None:
    assert resolve_memory_key(ISOLATION) is None
    assert resolve_memory_key(ISOLATION, tool_context=None) is None
    assert resolve_memory_key(MemoryIsolation(require_explicit_key=False)) is None


@pytest.mark.requirement("KEY-005", "KEY-006")
@pytest.mark.parametrize(
    "session",
    ["", "   ", "\t\n", None, True, False, {"id": "s"}, ["s"], 1.5, object()],
    ids=[
        "empty",
        "spaces",
        "tab-newline",
        "none",
        "true",
        "false",
        "dict",
        "list",
        "float",
        "object",
    ],
)
@pytest.mark.parametrize("require_explicit_key", [True, False])
def test_missing_empty_or_non_scalar_session_resolves_nothing(
    session: Any, require_explicit_key: bool
) -> None:
    isolation = MemoryIsolation(require_explicit_key=require_explicit_key)
    context = {"tenant_id": "acme", "user_id": "alice", "session_id": session}
    assert resolve_memory_key(isolation, tool_context=context) is None


@pytest.mark.requirement("KEY-005")
def test_absent_session_resolves_nothing_even_with_tenant_and_user() -> None:
    context = {"tenant_id": "acme", "user_id": "alice"}
    assert resolve_memory_key(ISOLATION, tool_context=context) is None
    assert resolve_memory_key(ISOLATION, tool_context=SimpleNamespace(tenant_id="acme")) is None


@pytest.mark.requirement("KEY-005")
@pytest.mark.parametrize("absent", [None, "", "  ", "\t\n", "MISSING"], ids=repr)
def test_tenant_and_user_default_only_once_a_session_resolves(absent: Any) -> None:
    context: dict[str, Any] = {"session_id": "s-1"}
    if absent != "MISSING":
        context.update(tenant_id=absent, user_id=absent)
    assert resolve_memory_key(ISOLATION, tool_context=context) == MemoryKey(
        "default", "anonymous", "s-1"
    )


@pytest.mark.requirement("KEY-005")
@pytest.mark.parametrize("part", ["tenant_id", "user_id"])
@pytest.mark.parametrize(
    "value",
    [True, False, {"id": "acme"}, ["acme"], 1.5, object()],
    ids=["true", "false", "mapping", "list", "float", "object"],
)
@pytest.mark.parametrize("require_explicit_key", [True, False])
def test_a_tenant_or_user_of_another_type_resolves_nothing(
    part: str, value: Any, require_explicit_key: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Not a default: a path one level short would give every tenant ``"default"``."""
    isolation = MemoryIsolation(require_explicit_key=require_explicit_key)
    context = {"tenant_id": "acme", "user_id": "alice", "session_id": "s-1", part: value}
    with caplog.at_level(logging.WARNING, logger="reference_impl.keys"):
        assert resolve_memory_key(isolation, tool_context=context) is None
    name = part.removesuffix("_id")
    assert [r.getMessage() for r in caplog.records] == [
        f"memory key not resolved: the {name} path of MemoryIsolation reaches neither a "
        "string nor an integer in tool_context"
    ]


@pytest.mark.requirement("KEY-005")
def test_parts_are_stripped_and_integers_accepted() -> None:
    context = {"tenant_id": " acme ", "user_id": 42, "session_id": "\ts-1\n"}
    assert resolve_memory_key(ISOLATION, tool_context=context) == MemoryKey("acme", "42", "s-1")


@pytest.mark.requirement("KEY-002", "KEY-005")
def test_resolved_parts_with_separators_stay_distinct() -> None:
    first = resolve_memory_key(ISOLATION, tool_context={"tenant_id": "a:b", "session_id": "s"})
    second = resolve_memory_key(
        ISOLATION, tool_context={"tenant_id": "a", "user_id": "b:anonymous", "session_id": "s"}
    )
    assert first is not None and second is not None
    assert first.composite() != second.composite()


@pytest.mark.requirement("KEY-004")
def test_extract_path_returns_none_for_absent_parts() -> None:
    source = {"a": SimpleNamespace(b={"c": 0})}
    assert extract_path(source, "a.b.c") == 0
    assert extract_path(source, "a.b.missing") is None
    assert extract_path(source, "a.missing.c") is None
    assert extract_path(None, "a") is None
