"""The state's copy and the view rendered from cached turns (``reference_impl.entries``)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference_impl import ConversationTurn, MemoryKey, TrajectoryDigest, canonical_json, schema
from reference_impl.entries import Entry, MemoryState, render_view
from reference_impl.health import HealthMachine
from reference_impl.types import MemoryHealth


def _entry(seq: int, *, digest: bool = False) -> Entry:
    turn = ConversationTurn(
        f"q{seq} ünï \U0001f600",
        "",
        trajectory_digest=TrajectoryDigest(["search"], "obs", "why", ["a:1"]) if digest else None,
    )
    return Entry.make(seq, turn, include_digest=True, size_of=len)


def _state() -> MemoryState:
    state = MemoryState(
        health=HealthMachine(2, 0.5, 3.0, MemoryHealth.RETRY, 1, 12.5),
        key=MemoryKey("t", "u", "s"),
        next_seq=5,
        summarized_through=1,
        dropped_turns=2,
        revision=7,
        stored=True,
    )
    state.set_summary("earlier")
    state.push_recent(_entry(4, digest=True))
    state.push_pending(_entry(2))
    state.push_pending(_entry(3))
    state.hide_oldest_visible()
    state.backlog.append(_entry(1))
    return state


def _as_dict(state: MemoryState) -> dict[str, object]:
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}


def test_a_copy_has_every_field_and_the_same_values() -> None:
    state = _state()
    copy = state.copy()
    assert _as_dict(copy) == _as_dict(state)
    # A field added to MemoryState or HealthMachine must be added to copy() too.
    assert {f.name for f in dataclasses.fields(state)} == set(_as_dict(copy))
    for f in dataclasses.fields(state.health):
        assert getattr(copy.health, f.name) == getattr(state.health, f.name), f.name


def test_changing_a_copy_leaves_the_original_as_it_was() -> None:
    state = _state()
    before = _as_dict(state)
    health_before = dataclasses.asdict(state.health)
    copy = state.copy()
    copy.push_recent(_entry(9))
    copy.pop_recent()
    copy.push_pending(_entry(8))
    copy.backlog.popleft()
    copy.health.on_success()
    copy.set_summary("later")
    copy.revision += 1
    assert _as_dict(state) == before
    assert dataclasses.asdict(state.health) == health_before


def test_the_view_matches_the_cached_fragments_and_is_fresh() -> None:
    state = _state()
    view = render_view("rolling_summary", state)
    memory = view["conversation_memory"]
    assert memory["recent_turns"] == [json.loads(e.fragment) for e in state.recent]
    assert memory["pending_turns"] == [json.loads(e.fragment) for e in state.visible_pending]
    assert memory["summary"] == "earlier"
    # Callers may mutate what they get: nothing of the stored turns is shared.
    memory["recent_turns"][0]["trajectory_digest"]["tools_invoked"].append("x")
    memory["recent_turns"][0]["user"] = "changed"
    again = render_view("rolling_summary", state)["conversation_memory"]
    assert again["recent_turns"] == [json.loads(e.fragment) for e in state.recent]


def test_the_view_of_each_strategy() -> None:
    state = _state()
    assert render_view("none", state) == {}
    assert set(render_view("truncation", state)["conversation_memory"]) == {"recent_turns"}
    state.health.on_failure(0.0)
    state.health.on_failure(0.0)  # past retry_attempts: DEGRADED shows recent turns only
    assert state.health.degraded
    assert set(render_view("rolling_summary", state)["conversation_memory"]) == {"recent_turns"}


_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
_TS = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**70), 2**70))


@given(user=_TEXT, assistant=_TEXT, ts=_TS, seq=st.integers(1, 2**62))
def test_plain_turn_texts_equal_the_generic_encoding(
    user: str, assistant: str, ts: float, seq: int
) -> None:
    """A turn of two strings is written by hand (the hot path): the texts must be exactly
    what the generic encoders give, for any text (quotes, controls, astral characters)."""
    state_json = pytest.importorskip("stm_redis.state_json")  # the Redis backend writes it
    entry = Entry.make(
        seq, ConversationTurn(user, assistant, ts=ts), include_digest=True, size_of=len
    )
    assert entry.fragment == canonical_json(entry.rendered)
    generic = json.dumps(schema.dump_turn(entry), ensure_ascii=False, separators=(",", ":"))
    assert state_json.turn_json(entry) == generic


def test_turns_with_artifacts_or_a_digest_encode_as_the_generic_path() -> None:
    state_json = pytest.importorskip("stm_redis.state_json")
    for turn in (
        ConversationTurn("q", "a", artifacts_shown={"k": [1, "é"]}),
        ConversationTurn("q", "a", artifacts_hidden_refs=["r"]),
        ConversationTurn("q", "a", trajectory_digest=TrajectoryDigest(["t"], "o")),
    ):
        entry = Entry.make(1, turn, include_digest=True, size_of=len)
        assert entry.fragment == canonical_json(entry.rendered)
        generic = json.dumps(schema.dump_turn(entry), ensure_ascii=False, separators=(",", ":"))
        assert state_json.turn_json(entry) == generic
