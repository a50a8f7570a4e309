"""The state store contract, checked against every store in ``stm_stores``."""

from __future__ import annotations

import math
import pickle
import unicodedata
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from stm_stores import (
    ConditionalStateStore,
    InMemoryStateStore,
    InvalidStateError,
    SQLiteStateStore,
    StaleStateError,
    StateStore,
    StateStoreError,
    codec,
    supports_conditional_save,
)

Store = InMemoryStateStore | SQLiteStateStore
StoreFactory = Callable[[], Store]

pytestmark = pytest.mark.anyio

LONG = "k" * 10_000

# Pairs a sloppy store would merge: prefixes, case, unicode normal forms,
# escaping look-alikes, truncation of long keys, trailing whitespace.
CONFUSABLE_KEY_PAIRS = [
    pytest.param("kv:v1:session", "session", id="kv-prefix"),
    pytest.param("kv:v1:", "", id="bare-kv-prefix"),
    pytest.param("a:b", "a%3Ab", id="percent-encoded-colon"),
    pytest.param("%", "%25", id="percent-encoded-percent"),
    pytest.param("User", "user", id="case"),
    pytest.param("straße", "strasse", id="casefold"),
    pytest.param("é", unicodedata.normalize("NFD", "é"), id="nfc-nfd"),
    pytest.param("ﬁ", "fi", id="nfkc-ligature"),
    pytest.param("a", "a ", id="trailing-space"),
    pytest.param("tenant:1:session:2", "tenant:1:session:2:", id="trailing-colon"),
    pytest.param(LONG, LONG + "x", id="long-prefix"),
    pytest.param(LONG + "a", LONG + "b", id="long-last-char"),
    pytest.param("x" * 10_000, "x" * 9_999, id="long-length"),
    pytest.param("😀", "\\U0001f600", id="escaped-emoji"),
    pytest.param("a'b", 'a"b', id="quotes"),
    pytest.param("'; DROP TABLE memory_state; --", "'", id="sql-injection"),
]


def state(revision: int = 0, **fields: Any) -> dict[str, Any]:
    """A small state dict shaped like ``memory.to_dict()`` output."""
    return {"revision": revision, "turns": [], "summary": "", **fields}


async def close(store: Store) -> None:
    if isinstance(store, SQLiteStateStore):
        await store.aclose()


def test_stores_implement_the_protocols(store: Store) -> None:
    assert isinstance(store, StateStore)
    assert isinstance(store, ConditionalStateStore)
    assert supports_conditional_save(store)


def test_plain_store_does_not_support_conditional_save() -> None:
    class PlainStore:
        async def save_memory_state(self, key: str, state: Any) -> None: ...

        async def load_memory_state(self, key: str) -> dict[str, Any] | None:
            return None

    assert isinstance(PlainStore(), StateStore)
    assert not supports_conditional_save(PlainStore())


async def test_round_trip(store: Store) -> None:
    saved = state(3, turns=[{"user": "hi", "assistant": "hello ✓"}], nested={"x": [1, 2.5, None]})
    await store.save_memory_state("s", saved)
    assert await store.load_memory_state("s") == saved
    replacement = state(4, summary="later")
    await store.save_memory_state("s", replacement)
    assert await store.load_memory_state("s") == replacement


async def test_state_without_revision_round_trips(store: Store) -> None:
    await store.save_memory_state("old", {"turns": []})
    assert await store.load_memory_state("old") == {"turns": []}


async def test_absent_key_loads_none(store: Store) -> None:
    assert await store.load_memory_state("missing") is None
    await store.save_memory_state("present", state())
    assert await store.load_memory_state("missing") is None
    assert await store.load_memory_state("presen") is None


@pytest.mark.parametrize(("first", "second"), CONFUSABLE_KEY_PAIRS)
async def test_confusable_keys_are_kept_apart(store: Store, first: str, second: str) -> None:
    assert first != second
    await store.save_memory_state(first, state(1, owner=first))
    await store.save_memory_state(second, state(2, owner=second))
    assert await store.load_memory_state(first) == state(1, owner=first)
    assert await store.load_memory_state(second) == state(2, owner=second)
    assert await store.keys() == sorted([first, second])


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(keys=st.lists(st.text(), min_size=2, max_size=6, unique=True))
@example(keys=["kv:v1:a", "a", "kv:v1:", "kv:v1"])
@example(keys=["\x00", "", "a\x00b", "a\x00c"])
def test_distinct_keys_never_share_a_record(store_factory: StoreFactory, keys: list[str]) -> None:
    async def check() -> None:
        store = store_factory()
        try:
            for index, key in enumerate(keys):
                await store.save_memory_state(key, state(index, key=key))
            for index, key in enumerate(keys):
                assert await store.load_memory_state(key) == state(index, key=key)
            assert await store.keys() == sorted(keys)
        finally:
            await close(store)

    anyio.run(check)


async def test_conditional_save_on_empty_key(store: Store) -> None:
    await store.save_memory_state_if("s", state(1), expected_revision=None)
    assert await store.load_memory_state("s") == state(1)


async def test_conditional_save_with_matching_revision(store: Store) -> None:
    await store.save_memory_state("s", state(1))
    await store.save_memory_state_if("s", state(2, summary="b"), expected_revision=1)
    assert await store.load_memory_state("s") == state(2, summary="b")


async def test_conditional_save_treats_missing_revision_as_zero(store: Store) -> None:
    await store.save_memory_state("s", {"turns": []})
    await store.save_memory_state_if("s", state(1), expected_revision=0)
    assert await store.load_memory_state("s") == state(1)


@pytest.mark.parametrize(
    ("stored", "expected", "actual"),
    [(1, None, 1), (2, 1, 2), (1, 2, 1), (0, None, 0), (None, 0, None), (None, 5, None)],
)
async def test_stale_conditional_save_is_refused(
    store: Store, stored: int | None, expected: int | None, actual: int | None
) -> None:
    before = None if stored is None else state(stored, summary="before")
    if before is not None:
        await store.save_memory_state("s", before)
    with pytest.raises(StaleStateError) as raised:
        await store.save_memory_state_if("s", state(9, summary="after"), expected_revision=expected)
    error = raised.value
    assert (error.key, error.expected, error.actual) == ("s", expected, actual)
    assert "'s'" in str(error)
    assert await store.load_memory_state("s") == before
    restored = pickle.loads(pickle.dumps(error))
    assert (type(restored), restored.key, restored.expected, restored.actual, str(restored)) == (
        StaleStateError,
        "s",
        expected,
        actual,
        str(error),
    )


async def test_only_one_concurrent_conditional_save_wins(store: Store) -> None:
    outcomes: list[str] = []

    async def writer(name: str) -> None:
        try:
            await store.save_memory_state_if("s", state(1, owner=name), expected_revision=None)
            outcomes.append(name)
        except StaleStateError:
            outcomes.append("stale")

    async with anyio.create_task_group() as tasks:
        for index in range(10):
            tasks.start_soon(writer, f"w{index}")
    winners = [outcome for outcome in outcomes if outcome != "stale"]
    assert len(outcomes) == 10 and len(winners) == 1
    assert await store.load_memory_state("s") == state(1, owner=winners[0])


async def test_a_key_longer_than_every_store_holds_is_rejected(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before it reaches the database, whose driver raises a bare
    ``OverflowError`` for a string over 2**31 - 1 bytes (the real limit is 10**9)."""
    monkeypatch.setattr(codec, "MAX_KEY_BYTES", 8)
    await store.save_memory_state("ö" * 4, state())  # 8 bytes: the longest key
    for key in ("ö" * 4 + "x", "ö" * 5):
        with pytest.raises(StateStoreError, match="bytes in UTF-8") as raised:
            await store.save_memory_state(key, state())
        assert raised.value.key == key
        with pytest.raises(StateStoreError, match="bytes in UTF-8"):
            await store.load_memory_state(key)
    assert await store.keys() == ["ö" * 4]


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(state(payload=object()), id="object"),
        pytest.param(state(tags={"a", "b"}), id="set"),
        pytest.param(state(blob=b"bytes"), id="bytes"),
        pytest.param(state(score=math.nan), id="nan"),
        pytest.param(state(score=math.inf), id="inf"),
        pytest.param(state(pair=(1, 2)), id="tuple"),
        pytest.param(state(by_id={1: "one"}), id="int-dict-key"),
        pytest.param({"revision": "3"}, id="str-revision"),
        pytest.param({"revision": -1}, id="negative-revision"),
        pytest.param({"revision": 2**63}, id="revision-past-int64"),
        pytest.param({"revision": True}, id="bool-revision"),
        pytest.param({"revision": 1.0}, id="float-revision"),
    ],
)
@pytest.mark.parametrize("conditional", [False, True], ids=["save", "save_if"])
async def test_invalid_state_is_rejected_and_nothing_written(
    store: Store, bad: dict[str, Any], conditional: bool
) -> None:
    key = "tenant:7:session:é"
    with pytest.raises(InvalidStateError) as raised:
        if conditional:
            await store.save_memory_state_if(key, bad, expected_revision=None)
        else:
            await store.save_memory_state(key, bad)
    assert raised.value.key == key
    assert repr(key) in str(raised.value)
    assert await store.load_memory_state(key) is None
    assert await store.keys() == []


async def test_long_key_is_shortened_in_messages_only(store: Store) -> None:
    with pytest.raises(InvalidStateError) as raised:
        await store.save_memory_state(LONG, state(payload=object()))
    assert raised.value.key == LONG
    assert repr(LONG[:100]) in str(raised.value)
    assert len(str(raised.value)) < 500


async def test_invalid_state_leaves_existing_record_unchanged(store: Store) -> None:
    await store.save_memory_state("s", state(1))
    with pytest.raises(InvalidStateError):
        await store.save_memory_state("s", state(2, payload=object()))
    assert await store.load_memory_state("s") == state(1)


async def test_non_mapping_state_is_rejected(store: Store) -> None:
    with pytest.raises(InvalidStateError, match="mapping"):
        await store.save_memory_state("s", [("revision", 1)])  # type: ignore[arg-type]


@pytest.mark.parametrize("key", [None, 1, b"s", ("a", "b")])
async def test_non_str_key_is_rejected(store: Store, key: Any) -> None:
    with pytest.raises(TypeError):
        await store.save_memory_state(key, state())
    with pytest.raises(TypeError):
        await store.load_memory_state(key)


async def test_key_with_lone_surrogate_is_rejected(store: Store) -> None:
    with pytest.raises(StateStoreError) as raised:
        await store.save_memory_state("bad\ud800", state())
    assert raised.value.key == "bad\ud800"
    assert await store.keys() == []


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(state(2, summary="\ud800"), id="summary"),
        pytest.param(state(2, turns=[{"seq": 1, "user_message": "a\udfff"}]), id="turn"),
        pytest.param(state(2, turns=[{"seq": 1, "artifacts": {"\ud83d": 1}}]), id="turn-key"),
    ],
)
async def test_state_with_a_lone_surrogate_is_refused(store: Store, bad: dict[str, Any]) -> None:
    await store.save_memory_state("s", state(1))
    for save in (
        store.save_memory_state("s", bad),
        store.save_memory_state_if("s", bad, expected_revision=1),
    ):
        with pytest.raises(InvalidStateError, match="lone surrogate"):
            await save
    assert await store.load_memory_state("s") == state(1)


@pytest.mark.parametrize("expected", [True, 1.0, "1"])
async def test_non_int_expected_revision_is_rejected(store: Store, expected: Any) -> None:
    await store.save_memory_state("s", state(1))
    with pytest.raises(TypeError):
        await store.save_memory_state_if("s", state(2), expected_revision=expected)
    assert await store.load_memory_state("s") == state(1)


@pytest.mark.parametrize("expected", [-1, 2**63])
async def test_out_of_range_expected_revision_is_rejected(store: Store, expected: int) -> None:
    await store.save_memory_state("s", state(1))
    with pytest.raises(ValueError, match="from 0 to 2"):
        await store.save_memory_state_if("s", state(2), expected_revision=expected)
    assert await store.load_memory_state("s") == state(1)


async def test_turn_seqs_at_and_beyond_64_bits_round_trip(store: Store) -> None:
    # At the bounds of SQLite's INTEGER a turn gets a row; beyond them the state is kept
    # whole (SQLite would raise OverflowError binding such a seq).
    def turns(*seqs: int) -> list[dict[str, Any]]:
        return [{"seq": seq, "user_message": f"turn {seq}"} for seq in seqs]

    at_bounds = state(1, turns=turns(2**63 - 1, -(2**63)))
    beyond = state(2, turns=turns(2**63 - 1, 2**63, -(2**63) - 1))
    await store.save_memory_state("s", at_bounds)
    assert await store.load_memory_state("s") == at_bounds
    await store.save_memory_state_if("s", beyond, expected_revision=1)
    assert await store.load_memory_state("s") == beyond


async def test_loaded_state_is_not_aliased(store: Store) -> None:
    await store.save_memory_state("s", state(1, turns=[{"user": "a"}]))
    loaded = await store.load_memory_state("s")
    assert loaded is not None
    loaded["turns"][0]["user"] = "changed"
    loaded["turns"].append({"user": "extra"})
    loaded["revision"] = 99
    assert await store.load_memory_state("s") == state(1, turns=[{"user": "a"}])
    assert await store.load_memory_state("s") is not await store.load_memory_state("s")


async def test_saved_state_is_not_aliased(store: Store) -> None:
    source = state(1, turns=[{"user": "a"}])
    await store.save_memory_state("s", source)
    source["turns"][0]["user"] = "changed"
    source["summary"] = "changed"
    assert await store.load_memory_state("s") == state(1, turns=[{"user": "a"}])


async def test_delete_and_keys(store: Store) -> None:
    assert await store.keys() == []
    await store.save_memory_state("b", state())
    await store.save_memory_state("a", state())
    assert await store.keys() == ["a", "b"]
    assert await store.delete_memory_state("a") is True
    assert await store.delete_memory_state("a") is False
    assert await store.load_memory_state("a") is None
    assert await store.keys() == ["b"]
    await store.save_memory_state_if("a", state(1), expected_revision=None)
    assert await store.load_memory_state("a") == state(1)


async def test_large_state_round_trips(store: Store) -> None:
    big = state(7, turns=[{"user": "u" * 1000, "assistant": "ü" * 1000} for _ in range(500)])
    await store.save_memory_state("big", big)
    assert await store.load_memory_state("big") == big
