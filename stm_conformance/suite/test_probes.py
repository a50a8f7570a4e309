"""Probes: one basic check per capability; a declared capability is verified by its probe."""

from __future__ import annotations

import pytest

from stm_conformance import RecordingCallbacks
from stm_conformance.checks import config, memory_view, turn, users
from stm_conformance.contract import MemoryIsolation, MemoryKey

req = pytest.mark.stm_requirement


def probe(capability: str) -> pytest.MarkDecorator:
    return pytest.mark.stm_probe(capability)


@probe("truncation")
@pytest.mark.stm_capability("truncation")
@req("STR-002")
async def test_probe_truncation(make_memory):
    memory = await make_memory(config("truncation", full_zone_turns=2))
    for i in range(3):
        await memory.add_turn(turn(i))
    assert users((await memory_view(memory))["recent_turns"]) == ["u1", "u2"]


@probe("rolling_summary")
@pytest.mark.stm_capability("rolling_summary")
@req("STR-003", "WM-007")
async def test_probe_rolling_summary(make_memory, scripted_summarizer):
    memory = await make_memory(config(full_zone_turns=1), summarizer=scripted_summarizer)
    for i in range(3):
        await memory.add_turn(turn(i))
    await memory.flush()
    view = await memory_view(memory)
    assert view.get("summary") and users(view["recent_turns"]) == ["u2"], view


@probe("serialization")
@pytest.mark.stm_capability("serialization")
@req("SER-002")
@pytest.mark.stm_capability("truncation")
async def test_probe_serialization(make_memory):
    cfg = config("truncation", full_zone_turns=2)
    key = MemoryKey("probe", "user", "serialize")
    memory = await make_memory(cfg, key=key)
    await memory.add_turn(turn(1))
    clone = await make_memory(cfg, key=key)
    clone.from_dict(memory.to_dict())
    assert await clone.get_llm_context() == await memory.get_llm_context()


@probe("persistence")
@pytest.mark.stm_capability("persistence")
@req("SER-005")
@pytest.mark.stm_capability("truncation")
async def test_probe_persistence(make_memory, stm_provider, stm_store):
    key = MemoryKey("probe", "user", "persist")
    cfg = config("truncation", full_zone_turns=2)
    memory = await make_memory(cfg, key=key)
    await memory.add_turn(turn(1))
    await memory.persist(stm_store, stm_provider.key_for_storage(key))
    fresh = await make_memory(cfg, key=key)
    await fresh.hydrate(stm_store, stm_provider.key_for_storage(key))
    assert users((await memory_view(fresh))["recent_turns"]) == ["u1"]


@probe("callbacks")
@pytest.mark.stm_capability("callbacks")
@req("CB-001")
@pytest.mark.stm_capability("truncation")
async def test_probe_callbacks(make_memory):
    calls = RecordingCallbacks()
    memory = await make_memory(config("truncation", full_zone_turns=2, **calls.config_kwargs()))
    await memory.add_turn(turn(1))
    await calls.wait_for("turns", 1)


@probe("key_resolution")
@pytest.mark.stm_capability("key_resolution")
@req("KEY-003")
def test_probe_key_resolution(stm_provider):
    resolve = getattr(stm_provider, "resolve_key", None)
    assert resolve is not None, "capability key_resolution needs Provider.resolve_key"
    key = MemoryKey("t", "u", "s")
    assert resolve(MemoryIsolation(), key, {}) == key


@probe("shared_state")
@pytest.mark.stm_capability("shared_state")
@req("CON-002")
@pytest.mark.stm_capability("truncation")
async def test_probe_shared_state(make_memory, make_peer):
    key = MemoryKey("probe", "user", "shared")
    cfg = config("truncation", full_zone_turns=3)
    a = await make_memory(cfg, key=key)
    b = await make_peer(cfg, key=key)
    await a.add_turn(turn(1))
    assert users((await memory_view(b))["recent_turns"]) == ["u1"], "the peer does not see turns"
