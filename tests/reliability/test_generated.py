"""Generated turns into ``add_turn`` and through every store; generated records into the
SQLite store's load path and ``from_dict``. Each is accepted and round-trips, or refused
with a typed error and nothing changed.

The case counts are the constants below; ``docs/reliability.md`` quotes them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stm_stores import CorruptStateError, InMemoryStateStore, SQLiteStateStore

from reference_impl import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    MemoryKey,
    ShortTermMemoryConfig,
    TrajectoryDigest,
)
from reference_impl.inputs import MAX_DEPTH

#: Generated turns, each tried against every store.
GENERATED_TURNS = 300
#: Generated records written into a SQLite file and loaded.
GENERATED_RECORDS = 300

HAVE_FAKEREDIS = all(importlib.util.find_spec(m) for m in ("redis", "fakeredis", "lupa"))
NEEDS_FAKEREDIS = pytest.mark.skipif(not HAVE_FAKEREDIS, reason="needs redis, fakeredis and lupa")
KEY = MemoryKey("tenant", "user", "generated")

# Every code point class a user can send: surrogates (no UTF-8 form), controls, NUL,
# astral characters, combining marks.
TEXT = st.text(st.characters(codec=None), max_size=40) | st.sampled_from(
    ["", "\x00", "\ud800", "a\udfffb", "🐧" * 3, "e\u0301", "\u2028", "x" * 20_000]
)
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | TEXT
)


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


JSONISH = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
) | st.sampled_from([_nested(MAX_DEPTH - 2), _nested(MAX_DEPTH + 1), _nested(2_000)])

DIGESTS = st.none() | st.builds(
    TrajectoryDigest,
    tools_invoked=st.lists(TEXT, max_size=3),
    observations_summary=TEXT,
    reasoning_summary=st.none() | TEXT,
    artifacts_refs=st.lists(TEXT, max_size=2),
)
TURNS = st.builds(
    ConversationTurn,
    user_message=TEXT,
    assistant_response=TEXT,
    trajectory_digest=DIGESTS,
    artifacts_shown=st.dictionaries(TEXT, JSONISH, max_size=3),
    artifacts_hidden_refs=st.lists(TEXT, max_size=2),
    ts=st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(min_value=-(10**400), max_value=10**400),
    turn_id=st.none() | st.uuids().map(str) | TEXT,
)


def _config() -> ShortTermMemoryConfig:
    return ShortTermMemoryConfig(
        strategy="truncation", budget=MemoryBudget(full_zone_turns=3, total_max_tokens=0)
    )


def _stores(scratch: Path) -> dict[str, Callable[[], Any]]:
    found: dict[str, Callable[[], Any]] = {
        "memory": InMemoryStateStore,
        "sqlite": lambda: SQLiteStateStore(scratch / "generated.db"),
    }
    if HAVE_FAKEREDIS:
        import fakeredis
        from stm_redis import RedisStateStore

        server = fakeredis.FakeServer()
        found["redis"] = lambda: RedisStateStore(
            fakeredis.FakeAsyncRedis(server=server), namespace="generated"
        )
    return found


async def _close(store: Any) -> None:
    close = getattr(store, "aclose", None)
    if close is not None:
        await close()


async def _try_turn(
    turn: ConversationTurn, stores: dict[str, Callable[[], Any]], key: MemoryKey
) -> str:
    memory = DefaultShortTermMemory(config=_config(), key=key)
    await memory.add_turn(ConversationTurn("before", "the generated turn"))
    before = (memory.to_dict(), await memory.get_llm_context())
    try:
        await memory.add_turn(turn)
    except TypeError:
        assert (memory.to_dict(), await memory.get_llm_context()) == before
        return "refused"
    for name, make in stores.items():
        store = make()
        saver = DefaultShortTermMemory(config=_config(), key=key)  # new to this store
        saver.from_dict(memory.to_dict())
        try:
            await saver.persist(store, key.composite())
            other = DefaultShortTermMemory(config=_config(), key=key)
            await other.hydrate(store, key.composite())
            assert other.to_dict()["turns"] == memory.to_dict()["turns"], name
            assert await other.get_llm_context() == await memory.get_llm_context(), name
        finally:
            await _close(store)
    return "accepted"


def test_generated_turns_are_refused_or_round_trip_through_every_store() -> None:
    outcomes: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as scratch:
        stores = _stores(Path(scratch))

        @settings(
            max_examples=GENERATED_TURNS,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(turn=TURNS)
        def run(turn: ConversationTurn) -> None:
            # A key of its own: the stores outlive the example.
            key = MemoryKey("tenant", "user", f"generated-{sum(outcomes.values())}")
            outcomes[asyncio.run(_try_turn(turn, stores, key))] += 1

        run()
    print(f"\ngenerated turns: {dict(outcomes)} over stores {sorted(stores)}")
    assert outcomes["accepted"] > 0 and outcomes["refused"] > 0, outcomes


def _valid_state() -> dict[str, Any]:
    async def make() -> dict[str, Any]:
        memory = DefaultShortTermMemory(config=_config(), key=KEY)
        for index in range(4):
            await memory.add_turn(ConversationTurn(f"u{index} 🐧", f"a{index}", ts=float(index)))
        state = memory.to_dict()
        state["revision"] = 1
        return state

    return asyncio.run(make())


def _mutations(state: dict[str, Any]) -> st.SearchStrategy[tuple[str, Any]]:
    """A stored record made from a valid state: a field or a turn replaced by generated
    data, or the JSON text cut or garbled."""
    text = json.dumps(state)
    field = st.tuples(st.sampled_from(sorted(state)), JSONISH).map(
        lambda pair: ("field", {**state, pair[0]: pair[1]})
    )
    turn = st.tuples(st.sampled_from(sorted(state["turns"][0])), JSONISH).map(
        lambda pair: (
            "turn",
            {**state, "turns": [{**state["turns"][0], pair[0]: pair[1]}, *state["turns"][1:]]},
        )
    )
    cut = st.integers(min_value=0, max_value=len(text)).map(lambda n: ("cut", text[:n]))
    garbage = TEXT.map(lambda t: ("garbage", t))
    return field | turn | cut | garbage


def _record(kind: str, value: Any) -> str | None:
    if kind in ("cut", "garbage"):
        return value if isinstance(value, str) else None
    try:
        return json.dumps(value, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        return None


RECORD_STORES = ["sqlite", pytest.param("redis", marks=NEEDS_FAKEREDIS)]


class _Records:
    """Writes a raw record where a store keeps its records, and opens that store."""

    def __init__(self, kind: str, scratch: Path) -> None:
        self.kind = kind
        self.db = scratch / "records.db"
        if kind == "redis":
            import fakeredis

            self.server = fakeredis.FakeServer()
        else:
            asyncio.run(self._create_tables())

    async def _create_tables(self) -> None:
        async with SQLiteStateStore(self.db) as store:
            await store.keys()

    def write(self, text: str) -> None:
        if self.kind == "redis":
            asyncio.run(self._hset(text))
            return
        with closing(sqlite3.connect(self.db, isolation_level=None)) as conn:
            conn.execute(
                "INSERT OR REPLACE INTO memory_state (key, revision, state, updated_at) "
                "VALUES (?, 1, ?, 0)",
                (KEY.composite(), text),
            )

    async def _hset(self, text: str) -> None:
        import fakeredis

        client = fakeredis.FakeAsyncRedis(server=self.server)
        await client.hset(f"records:{KEY.composite()}", mapping={"rev": "1", "state": text})
        await client.aclose()

    def store(self) -> Any:
        if self.kind == "redis":
            import fakeredis
            from stm_redis import RedisStateStore

            return RedisStateStore(
                fakeredis.FakeAsyncRedis(server=self.server), namespace="records"
            )
        return SQLiteStateStore(self.db)


@pytest.mark.parametrize("kind", RECORD_STORES)
def test_generated_records_load_or_are_reported_corrupt(kind: str) -> None:
    state = _valid_state()
    outcomes: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as scratch:
        records = _Records(kind, Path(scratch))

        @settings(
            max_examples=GENERATED_RECORDS,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(mutation=_mutations(state))
        def run(mutation: tuple[str, Any]) -> None:
            text = _record(*mutation)
            if text is None or not _storable(text):
                outcomes["not storable as text"] += 1
                return
            records.write(text)
            outcomes[asyncio.run(_load(records.store()))] += 1

        run()
    print(f"\ngenerated {kind} records: {dict(outcomes)}")
    assert outcomes["corrupt"] > 0 and outcomes["loaded"] + outcomes["refused by from_dict"] > 0


def _storable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def _load(store: Any) -> str:
    memory = DefaultShortTermMemory(config=_config(), key=KEY)
    before = memory.to_dict()
    try:
        try:
            await memory.hydrate(store, KEY.composite())
        except CorruptStateError:
            assert memory.to_dict() == before
            return "corrupt"
        except ValueError:
            assert memory.to_dict() == before
            return "refused by from_dict"
        state = memory.to_dict()
        if state == before:
            return "ignored (not saved for this key)"
        # What loads is valid data, and saves again through the store.
        assert not any(isinstance(v, float) and not math.isfinite(v) for v in _leaves(state)), (
            "a non-finite number was loaded"
        )
        await memory.persist(store, KEY.composite())
    finally:
        await _close(store)
    return "loaded"


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]
