"""KEY — isolation between memory keys."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reference_impl.types import MemoryIsolation, MemoryKey
from stm_conformance import ScriptedSummarizer
from stm_conformance.checks import config, eventually, memory_view, turn

req = pytest.mark.stm_requirement
cap = pytest.mark.stm_capability

ADVERSARIAL_KEYS = [
    (MemoryKey("a:b", "c", "d"), MemoryKey("a", "b:c", "d")),
    (MemoryKey("t", "u", "s%3A"), MemoryKey("t", "u", "s:")),
    (MemoryKey("tenant", "user", "séssion-🦜"), MemoryKey("tenant", "user", "séssion-🐧")),
    (MemoryKey("t", "u", "x" * 1000), MemoryKey("t", "u", "x" * 999)),
    (MemoryKey("", "", "s"), MemoryKey("default", "anonymous", "s")),
    (MemoryKey("kv:v1:t", "u", "s"), MemoryKey("t", "u", "s")),
]


def _marker_free(view: Any, marker: str) -> bool:
    return marker not in json.dumps(view, ensure_ascii=False)


@req("KEY-001")
@pytest.mark.parametrize("strategy", ["truncation", "rolling_summary"])
async def test_state_of_one_key_is_invisible_through_another(make_memory, strategy):
    cfg = config(strategy, full_zone_turns=1)
    a = await make_memory(cfg, key=MemoryKey("tenant-a", "user", "session"))
    b = await make_memory(cfg, key=MemoryKey("tenant-b", "user", "session"))
    empty_tokens = b.estimate_tokens()
    for i in range(4):
        await a.add_turn(turn(i, pad=5))
    if strategy == "rolling_summary":
        await a.flush()
    view_b = await memory_view(b)
    assert view_b.get("recent_turns") == [], f"key B sees turns of key A: {view_b}"
    assert "summary" not in view_b and "pending_turns" not in view_b, view_b
    assert b.estimate_tokens() == empty_tokens, "key B's token count moved with key A's turns"
    assert b.health.value == "healthy"


@req("KEY-001", "KEY-002")
@pytest.mark.parametrize("pair", ADVERSARIAL_KEYS, ids=lambda p: f"{p[0].composite()[:12]}")
async def test_adversarial_keys_stay_apart(make_memory, pair):
    first, second = pair
    cfg = config("truncation", full_zone_turns=3)
    a = await make_memory(cfg, key=first)
    await a.add_turn(turn(1, pad=3))
    b = await make_memory(cfg, key=second)
    assert _marker_free(await memory_view(b), "u1xxx"), f"{second!r} sees the turns of {first!r}"


@req("KEY-002")
def test_storage_key_is_injective_or_rejected():
    seen: dict[str, MemoryKey] = {}
    for pair in ADVERSARIAL_KEYS:
        for key in pair:
            composite = key.composite()
            other = seen.setdefault(composite, key)
            assert other == key, f"{other!r} and {key!r} share storage key {composite!r}"
    with pytest.raises(ValueError):
        MemoryKey("t", "u", "\ud800")
    with pytest.raises(TypeError):
        MemoryKey("t", "u", 42)  # type: ignore[arg-type]


@req("KEY-001")
@cap("persistence")
async def test_shared_store_keeps_keys_apart(make_memory, stm_store):
    cfg = config("truncation", full_zone_turns=3)
    key_a, key_b = ADVERSARIAL_KEYS[0]
    a = await make_memory(cfg, key=key_a)
    await a.add_turn(turn(7, pad=4))
    await a.persist(stm_store, key_a.composite())
    b = await make_memory(cfg, key=key_b)
    await b.hydrate(stm_store, key_b.composite())
    assert _marker_free(await memory_view(b), "u7xxxx"), "hydrate loaded another key's state"


@req("KEY-007")
@cap("serialization")
async def test_from_dict_refuses_another_keys_state(make_memory):
    cfg = config("truncation", full_zone_turns=3)
    a = await make_memory(cfg, key=MemoryKey("t", "u", "a"))
    await a.add_turn(turn(1))
    b = await make_memory(cfg, key=MemoryKey("t", "u", "b"))
    before = await memory_view(b)
    with pytest.raises(ValueError):
        b.from_dict(a.to_dict())
    assert await memory_view(b) == before, "a refused load changed the memory"


@req("KEY-007")
@cap("persistence")
async def test_hydrate_refuses_state_saved_under_another_key(make_memory, stm_store):
    cfg = config("truncation", full_zone_turns=3)
    key_a, key_b = MemoryKey("t", "u", "a"), MemoryKey("t", "u", "b")
    a = await make_memory(cfg, key=key_a)
    await a.add_turn(turn(3, pad=6))
    await a.persist(stm_store, key_a.composite())
    # A mis-routed record: A's state stored under B's storage key.
    stolen = await stm_store.load_memory_state(key_a.composite())
    await stm_store.save_memory_state(key_b.composite(), stolen)
    b = await make_memory(cfg, key=key_b)
    await b.hydrate(stm_store, key_b.composite())
    assert _marker_free(await memory_view(b), "u3xxxxxx"), "hydrate grafted another key's state"


# -- resolution (KEY-003..006): backends that resolve keys expose ``resolve_key`` ----------


def _resolver(provider: Any) -> Any:
    resolve = getattr(provider, "resolve_key", None)
    if resolve is None:
        pytest.skip("provider has no resolve_key")
    return resolve


@req("KEY-003")
@cap("key_resolution")
def test_explicit_key_wins(stm_provider):
    resolve = _resolver(stm_provider)
    explicit = MemoryKey("t1", "u1", "s1")
    got = resolve(MemoryIsolation(), explicit, {"tenant_id": "t2", "session_id": "s2"})
    assert got == explicit


@req("KEY-004")
@cap("key_resolution")
def test_keys_come_from_tool_context_dotted_paths(stm_provider):
    resolve = _resolver(stm_provider)
    iso = MemoryIsolation(tenant_key="org.id", user_key="who.id", session_key="conv.id")
    got = resolve(iso, None, {"org": {"id": "acme"}, "who": {"id": "ann"}, "conv": {"id": "c9"}})
    assert got == MemoryKey("acme", "ann", "c9")


@req("KEY-005")
@cap("key_resolution")
@pytest.mark.parametrize("session", [None, "", "   "])
def test_defaults_only_with_a_session(stm_provider, session):
    resolve = _resolver(stm_provider)
    ctx = {"tenant_id": "t"} if session is None else {"tenant_id": "t", "session_id": session}
    assert resolve(MemoryIsolation(require_explicit_key=True), None, ctx) is None
    assert resolve(MemoryIsolation(), None, {"session_id": "s"}) == MemoryKey(
        "default", "anonymous", "s"
    )


@req("KEY-006")
@cap("key_resolution")
def test_nothing_resolvable_disables_memory(stm_provider):
    resolve = _resolver(stm_provider)
    assert resolve(MemoryIsolation(require_explicit_key=True), None, {}) is None
    assert resolve(MemoryIsolation(require_explicit_key=True), None, None) is None


@req("KEY-001")
@cap("rolling_summary")
async def test_health_of_one_key_is_independent_of_another(make_memory):
    cfg = config(full_zone_turns=1, retry_backoff_base_s=30.0)
    failing, healthy = ScriptedSummarizer(), ScriptedSummarizer()
    failing.fail_always("raise")
    a = await make_memory(cfg, key=MemoryKey("tenant-a", "u", "s"), summarizer=failing)
    b = await make_memory(cfg, key=MemoryKey("tenant-b", "u", "s"), summarizer=healthy)
    for i in range(3):
        await a.add_turn(turn(i))
        await b.add_turn(turn(i))
    await failing.wait_for_calls(1)
    await eventually(lambda: a.health.value == "retry", what="key A in RETRY")
    await b.flush()
    assert b.health.value == "healthy", "key A's summarizer failures changed key B's health"
