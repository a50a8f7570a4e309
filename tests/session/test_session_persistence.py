"""Persistence through the router: conflicts, summaries across processes, the LRU bound."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import session_workers
from stm_stores import InMemoryStateStore, SQLiteStateStore

from reference_impl import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    MemoryKey,
    ShortTermMemoryConfig,
)
from reference_impl.session import MemoryRouter, PersistConflictError
from reference_impl.store import StaleStateError, StateStoreError

pytestmark = pytest.mark.anyio

KEY = MemoryKey("t", "u", "s")


def _truncation(window: int = 5) -> ShortTermMemoryConfig:
    return ShortTermMemoryConfig(strategy="truncation", budget=MemoryBudget(full_zone_turns=window))


async def _finish(router: MemoryRouter, message: str, key: MemoryKey = KEY) -> Mapping[str, Any]:
    async with router.turn(memory_key=key) as turn:
        memory: Mapping[str, Any] = turn.llm_context.get("conversation_memory", {})
        await turn.finish(message, "ok")
    return memory


async def _stored_users(store: Any, key: MemoryKey = KEY) -> list[str]:
    state = await store.load_memory_state(key.composite())
    assert state is not None
    return [t["user_message"] for t in [*state["pending"], *state["turns"]]]


# -- conflicts ---------------------------------------------------------------------------


async def test_two_routers_on_one_key_lose_no_update() -> None:
    store = InMemoryStateStore()
    first, second = (
        MemoryRouter(_truncation(), store=store),
        MemoryRouter(_truncation(), store=store),
    )
    # Both load the key before either saves: the second save is stale.
    async with first.turn(memory_key=KEY) as a, second.turn(memory_key=KEY) as b:
        await a.finish("from first", "ok")
        await b.finish("from second", "ok")
    assert second.stats.conflicts == 1 and second.stats.hydrations == 2
    assert await _stored_users(store) == ["from first", "from second"]
    # The first router's copy is now stale too; its next turn merges again.
    await _finish(first, "first again")
    assert first.stats.conflicts == 1
    assert await _stored_users(store) == ["from first", "from second", "first again"]
    # After a conflict the router serves the merged memory.
    memory = await _finish(first, "and again")
    assert [t["user"] for t in memory["recent_turns"]] == [
        "from first",
        "from second",
        "first again",
    ]
    await first.aclose()
    await second.aclose()
    assert first.stats.lost_turns == second.stats.lost_turns == 0


class _StaleFirst(InMemoryStateStore):
    """Refuses the first ``refusals`` conditional saves as stale, without writing."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals

    async def save_memory_state_if(
        self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
    ) -> None:
        if self.refusals > 0:
            self.refusals -= 1
            raise StaleStateError(key, expected=expected_revision, actual=99)
        await super().save_memory_state_if(key, state, expected_revision=expected_revision)


async def test_conflicts_beyond_the_retry_bound_raise_a_typed_error() -> None:
    store = _StaleFirst(refusals=3)
    router = MemoryRouter(_truncation(), store=store, conflict_retries=2)
    async with router.turn(memory_key=KEY) as turn:
        with pytest.raises(PersistConflictError) as caught:
            await turn.finish("kept in memory", "ok")
    error = caught.value
    assert isinstance(error, StaleStateError)
    assert error.attempts == 3 and error.key == KEY.composite()
    assert router.stats.conflicts == 3 and router.stats.conflict_failures == 1
    assert await store.keys() == []
    restored = pickle.loads(pickle.dumps(error))
    assert isinstance(restored, PersistConflictError) and restored.attempts == 3
    # The unsaved turn rides on the next successful save.
    await _finish(router, "next")
    assert await _stored_users(store) == ["kept in memory", "next"]
    await router.aclose()
    assert router.stats.lost_turns == 0


async def test_unsaved_turns_lost_on_close_are_counted() -> None:
    store = _StaleFirst(refusals=100)
    router = MemoryRouter(_truncation(), store=store, conflict_retries=0)
    async with router.turn(memory_key=KEY) as turn:
        with pytest.raises(PersistConflictError):
            await turn.finish("doomed", "ok")
    with pytest.raises(PersistConflictError):
        await router.aclose()
    assert router.stats.lost_turns == 1


@pytest.mark.requirement("SER-004", "SER-006")
async def test_a_migrated_v1_record_can_be_continued() -> None:
    store = InMemoryStateStore()
    v1 = {
        "version": 1,
        "health": "healthy",
        "turns": [{"user_message": "from v1", "assistant_response": "ok"}],
        "config_snapshot": {"strategy": "truncation"},
    }
    await store.save_memory_state(KEY.composite(), v1)
    router = MemoryRouter(_truncation(), store=store)
    try:
        await _finish(router, "after migration")
    finally:
        await router.aclose(flush=False)
    assert await _stored_users(store) == ["from v1", "after migration"]


class _LandsAfterCancel(InMemoryStateStore):
    """Writes land after a delay even if the caller is cancelled, as SQLite's thread does."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = asyncio.Event()

    async def save_memory_state_if(
        self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
    ) -> None:
        async def write() -> None:
            self.writing.set()
            await asyncio.sleep(0.05)
            await InMemoryStateStore.save_memory_state_if(
                self, key, state, expected_revision=expected_revision
            )

        await asyncio.shield(asyncio.ensure_future(write()))


async def test_a_cancelled_finish_neither_loses_nor_duplicates_its_turn() -> None:
    store = _LandsAfterCancel()
    router = MemoryRouter(_truncation(), store=store)

    async def finish_first() -> None:
        await _finish(router, "first")

    task = asyncio.ensure_future(finish_first())
    await store.writing.wait()
    task.cancel()  # while the write is in flight; it lands anyway
    with pytest.raises(asyncio.CancelledError):
        await task
    await _finish(router, "second")
    assert await _stored_users(store) == ["first", "second"]
    assert router.stats.conflicts == 0
    await router.aclose()


# -- hydration and eviction --------------------------------------------------------------


async def test_a_key_is_hydrated_once_and_evicted_state_comes_back() -> None:
    store = InMemoryStateStore()
    router = MemoryRouter(_truncation(), store=store, max_memories=1)
    other = MemoryKey("t", "u", "other")
    await _finish(router, "one")
    await _finish(router, "two")
    assert router.stats.hydrations == 1
    await _finish(router, "elsewhere", key=other)  # evicts KEY
    assert router.loaded_keys() == [other] and router.stats.evictions == 1
    memory = await _finish(router, "three")
    assert [t["user"] for t in memory["recent_turns"]] == ["one", "two"]
    assert router.stats.hydrations == 3
    await router.aclose()


async def test_memories_in_use_are_never_evicted() -> None:
    router = MemoryRouter(_truncation(), store=InMemoryStateStore(), max_memories=1)
    keys = [MemoryKey("t", "u", f"s{i}") for i in range(3)]
    turns = [router.turn(memory_key=key) for key in keys]
    for turn in turns:
        await turn.__aenter__()
    assert len(router) == 3  # over the bound while all are in use
    for turn in turns:
        await turn.finish("q", "a")
        await turn.__aexit__(None, None, None)
    assert len(router) == 1 and router.loaded_keys() == [keys[-1]]
    await router.aclose()


class _GatedSaves(InMemoryStateStore):
    """Saves of ``KEY`` wait for ``gate`` while ``holding``, then fail if ``failing``."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = self.failing = False
        self.gate, self.entered = asyncio.Event(), asyncio.Event()

    async def save_memory_state_if(
        self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
    ) -> None:
        if self.holding and key == KEY.composite():
            self.entered.set()
            await self.gate.wait()
            if self.failing:
                raise StateStoreError("transient failure", key=key)
        await super().save_memory_state_if(key, state, expected_revision=expected_revision)


async def _slow_summary(payload: Mapping[str, Any]) -> dict[str, str]:
    await asyncio.sleep(0.05)
    return {"summary": "summary of " + ",".join(t["user"] for t in payload["turns"])}


def _stm_tasks() -> list[str]:
    return [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("stm-")]


async def test_an_eviction_whose_caller_is_cancelled_still_retires_the_memory() -> None:
    """A turn on another key evicts ``KEY`` and waits for its save in flight; that turn is
    cancelled. The memory it took off the list is still retired: its tasks end, it is
    closed, and the turn whose save then fails is counted lost, not dropped silently."""
    store = _GatedSaves()
    summarize = ShortTermMemoryConfig(
        strategy="rolling_summary", budget=MemoryBudget(full_zone_turns=1)
    )
    router = MemoryRouter(summarize, store=store, summarizer=_slow_summary, max_memories=1)
    await _finish(router, "a1")
    store.holding = store.failing = True
    saving = asyncio.ensure_future(_finish(router, "a2"))
    await store.entered.wait()
    saving.cancel()  # its save goes on, held
    with pytest.raises(asyncio.CancelledError):
        await saving
    evicting = asyncio.ensure_future(_finish(router, "b1", key=MemoryKey("t", "u", "other")))
    for _ in range(20):  # it takes KEY off the list and waits for the save in flight
        await asyncio.sleep(0)
    assert KEY not in router.loaded_keys() and not evicting.done()
    evicting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await evicting
    store.gate.set()  # the save fails: a2 is unsaved
    await router.aclose()
    assert _stm_tasks() == [], "tasks left after aclose()"
    assert "a2" not in await _stored_users(store) and router.stats.lost_turns == 1


async def test_a_cancelled_aclose_is_finished_by_the_next() -> None:
    """``aclose`` cancelled while it waits for a turn in progress: the memory it took off
    the list is retired once that turn ends, and the next ``aclose`` waits for that: no
    task left, the summary flushed and saved."""
    store = InMemoryStateStore()
    summarize = ShortTermMemoryConfig(
        strategy="rolling_summary", budget=MemoryBudget(full_zone_turns=1)
    )
    router = MemoryRouter(summarize, store=store, summarizer=_slow_summary)
    await _finish(router, "a1")
    inside, release = asyncio.Event(), asyncio.Event()

    async def long_turn() -> None:
        async with router.turn(memory_key=KEY) as turn:
            inside.set()
            await release.wait()
            await turn.finish("a2", "ok")  # a1 is evicted: a summary starts

    turn = asyncio.ensure_future(long_turn())
    await inside.wait()
    closing = asyncio.ensure_future(router.aclose())
    for _ in range(10):
        await asyncio.sleep(0)
    closing.cancel()  # a shutdown timeout, say
    with pytest.raises(asyncio.CancelledError):
        await closing
    release.set()
    await turn
    await router.aclose()
    assert _stm_tasks() == [], "tasks left after the second aclose()"
    stored = await store.load_memory_state(KEY.composite())
    assert stored is not None
    assert stored["pending"] == [] and stored["summary"] == "summary of a1"


# -- summaries reach the store in the background -----------------------------------------


async def _stored_once_summarized(store: SQLiteStateStore) -> dict[str, Any]:
    """The stored state of ``KEY`` once it has no pending turn, or as it is after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        state = await store.load_memory_state(KEY.composite())
        assert state is not None
        if state["pending"] == [] or time.monotonic() > deadline:
            return state
        await asyncio.sleep(0.02)


def _run_print_memory(db: Path, key: MemoryKey) -> dict[str, Any]:
    """The ``conversation_memory`` a new router in a new process injects for ``key``."""
    code = "import session_workers; session_workers.print_memory_main()"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    result = subprocess.run(
        [sys.executable, "-c", code, str(db), key.tenant_id, key.user_id, key.session_id],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    memory: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return memory


async def test_background_summary_is_saved_and_seen_by_a_new_process(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    store = SQLiteStateStore(db)
    summarizer = session_workers.CoverageSummarizer()

    async def slow_summarizer(payload: Any) -> dict[str, str]:
        await asyncio.sleep(0.2)  # slower than a turn: the turn's own save has no summary
        return await summarizer(payload)

    router = MemoryRouter(
        session_workers.coverage_config(), store=store, summarizer=slow_summarizer
    )
    for index in range(5):  # window 3: turns 0 and 1 are evicted to pending
        await _finish(router, f"TURN-{index}")
    state = await store.load_memory_state(KEY.composite())
    assert state is not None and state["summary"] == ""
    assert [t["user_message"] for t in state["pending"]] == ["TURN-0", "TURN-1"]

    # No flush() or aclose(): the router's own task saves the summary.
    state = await _stored_once_summarized(store)
    assert state["pending"] == [] and state["summary"] == "TURN-0 TURN-1"

    memory = await asyncio.to_thread(_run_print_memory, db, KEY)
    assert memory["summary"] == "TURN-0 TURN-1"
    assert [t["user"] for t in memory["recent_turns"]] == ["TURN-2", "TURN-3", "TURN-4"]
    assert "pending_turns" not in memory
    await router.aclose()
    await store.aclose()


async def test_back_to_back_turns_take_the_background_summary_along(tmp_path: Path) -> None:
    store = SQLiteStateStore(tmp_path / "state.db")
    router = MemoryRouter(
        session_workers.coverage_config(),
        store=store,
        summarizer=session_workers.CoverageSummarizer(),
        summary_save_delay_s=1.0,
    )
    turns = 40  # window 3: from the fourth turn on, each turn evicts one to summarize
    started = time.monotonic()
    for index in range(turns):
        await _finish(router, f"TURN-{index}")
    assert time.monotonic() - started < 1.0, "too slow to test within the delay"
    # One save per turn; the summaries rode along with the turns' saves, none alone.
    assert router.stats.persists == turns
    state = await _stored_once_summarized(store)  # no more turns: saved alone, after the delay
    assert state["pending"] == []
    assert state["summary"] == " ".join(f"TURN-{i}" for i in range(turns - 3))
    assert router.stats.persists == turns + 1
    await router.aclose()
    await store.aclose()


async def test_turns_that_keep_coming_carry_the_summary_and_it_is_saved_once_they_stop(
    tmp_path: Path,
) -> None:
    store = SQLiteStateStore(tmp_path / "state.db")
    router = MemoryRouter(
        session_workers.coverage_config(),
        store=store,
        summarizer=session_workers.CoverageSummarizer(),
        summary_save_delay_s=0.5,
    )
    # 30 turns 0.02 s apart: longer in all than the delay, never the delay without a turn.
    turns, longest_gap, last = 30, 0.0, time.monotonic()
    for index in range(turns):
        await _finish(router, f"TURN-{index}")
        now = time.monotonic()
        longest_gap, last = max(longest_gap, now - last), now
        await asyncio.sleep(0.02)
    assert longest_gap < 0.45, f"the machine stalled {longest_gap:.2f}s between two turns"
    # Every summary but the last rode along with a turn's save; none was saved alone.
    assert router.stats.persists == turns
    state = await _stored_once_summarized(store)  # after the quiet spell: saved alone
    assert state["pending"] == []
    assert state["summary"] == " ".join(f"TURN-{i}" for i in range(turns - 3))
    assert router.stats.persists == turns + 1
    await router.aclose()
    await store.aclose()


@pytest.mark.parametrize(
    ("delay", "error"),
    [(-0.1, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
     ("0.1", TypeError), (True, TypeError), (None, TypeError)],
)  # fmt: skip
def test_summary_save_delay_is_a_finite_non_negative_number(delay: Any, error: type) -> None:
    with pytest.raises(error, match="summary_save_delay_s"):
        MemoryRouter(_truncation(), summary_save_delay_s=delay)


# -- LRU bound ---------------------------------------------------------------------------


@pytest.fixture
def fast_tmp(tmp_path: Path) -> Iterator[Path]:
    """A directory on tmpfs when there is one: fsync cost is not what the LRU test measures."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = Path(tempfile.mkdtemp(prefix="stm-lru-", dir="/dev/shm"))
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path


SESSIONS = 10_000
BOUND = 100
TRACED = 1_000  # the last sessions run under tracemalloc (it triples the cost per session)


async def test_lru_bound_holds_over_ten_thousand_sessions(fast_tmp: Path) -> None:
    db = fast_tmp / "lru.db"
    # The store remembers the turn rows of as many keys as the router holds memories, so
    # that the memory measured below is the router's (the store's share is bounded too).
    store = SQLiteStateStore(db, cached_keys=BOUND)
    config = _truncation(window=2)
    alive: weakref.WeakSet[DefaultShortTermMemory] = weakref.WeakSet()

    def factory(key: MemoryKey) -> DefaultShortTermMemory:
        memory = DefaultShortTermMemory(config=config, key=key)
        alive.add(memory)
        return memory

    router = MemoryRouter(config, store=store, max_memories=BOUND, memory_factory=factory)
    tasks_before = asyncio.all_tasks()
    started = time.perf_counter()
    most = 0
    for index in range(SESSIONS):
        if index == SESSIONS - TRACED:
            gc.collect()
            tracemalloc.start()
        key = MemoryKey("tenant", f"user-{index % 37}", f"session-{index}")
        await _finish(router, f"hello from session {index}", key=key)
        most = max(most, len(router))
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    elapsed = time.perf_counter() - started
    gc.collect()

    assert most <= BOUND and len(router) == BOUND
    assert len(alive) == BOUND  # evicted memories are released, not just unlisted
    assert router.stats.evictions == SESSIONS - BOUND and router.stats.lost_turns == 0
    held = {k.session_id for k in router.loaded_keys()}
    assert held == {f"session-{i}" for i in range(SESSIONS - BOUND, SESSIONS)}

    async with SQLiteStateStore(db) as reader:
        assert len(await reader.keys()) == SESSIONS
        for index in range(0, SESSIONS - BOUND, 97):  # a sample of evicted sessions
            key = MemoryKey("tenant", f"user-{index % 37}", f"session-{index}")
            state = await reader.load_memory_state(key.composite())
            assert state is not None
            assert [t["user_message"] for t in state["turns"]] == [f"hello from session {index}"]

    print(
        f"\nLRU: {SESSIONS} sessions, bound {BOUND}: at most {most} memories held, "
        f"{len(alive)} alive after gc; {elapsed:.1f}s; tracemalloc over the last {TRACED} "
        f"sessions: current {current / 1024:.0f} KiB, peak {peak / 1024:.0f} KiB"
    )
    # The last TRACED sessions created the BOUND memories still held; a leak of even a
    # fraction of a memory per session would push this far up.
    assert current < 2 * 1024 * 1024
    await router.aclose()
    await store.aclose()
    assert asyncio.all_tasks() - tasks_before == set(), "tasks left after aclose()"


class _FailingSaves(InMemoryStateStore):
    """A store whose next conditional saves fail: ``fail_before_write`` of them before
    writing anything, then ``fail_after_write`` of them after the write landed (a lost
    reply)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_before_write = 0
        self.fail_after_write = 0

    async def save_memory_state_if(
        self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
    ) -> None:
        if self.fail_before_write:
            self.fail_before_write -= 1
            raise StateStoreError("the database is busy", key=key)
        await InMemoryStateStore.save_memory_state_if(
            self, key, state, expected_revision=expected_revision
        )
        if self.fail_after_write:
            self.fail_after_write -= 1
            raise StateStoreError("the reply was lost after the write", key=key)


@pytest.mark.parametrize("strategy", ["truncation", "rolling_summary"])
async def test_a_save_that_landed_but_raised_records_no_turn_twice(strategy: str) -> None:
    store = _FailingSaves()
    config = ShortTermMemoryConfig(
        strategy=strategy,  # type: ignore[arg-type]
        budget=MemoryBudget(full_zone_turns=10),
    )

    async def summarize(payload: Mapping[str, Any]) -> dict[str, str]:
        return {"summary": "s"}

    router = MemoryRouter(config, store=store, summarizer=summarize)
    await _finish(router, "first")
    store.fail_after_write = 1
    with pytest.raises(StateStoreError):
        await _finish(router, "second")  # stored, but the router cannot know
    await _finish(router, "third")  # stale: re-hydrates, finds "second" stored already
    assert await _stored_users(store) == ["first", "second", "third"]
    assert router.stats.conflicts == 1 and router.stats.already_saved_turns == 1
    await router.aclose()


@pytest.mark.parametrize("strategy", ["truncation", "rolling_summary"])
async def test_a_landed_turn_another_writer_moved_on_is_not_recorded_again(strategy: str) -> None:
    """Router A's save of X wrote, then raised. Router B, on the same store, loads X and
    moves it out of the turns kept verbatim (its window drops it, or a summary covers
    it). A's next save conflicts: the state it merges with no longer holds X verbatim,
    and still X must not be recorded twice."""
    store = _FailingSaves()
    rolling = strategy == "rolling_summary"
    config = ShortTermMemoryConfig(
        strategy=strategy,  # type: ignore[arg-type]
        budget=MemoryBudget(full_zone_turns=1 if rolling else 2, total_max_tokens=0),
    )

    async def summarize(payload: Mapping[str, Any]) -> dict[str, str]:
        users = [t["user"] for t in payload["turns"]]
        return {"summary": " ".join(filter(None, [payload["previous_summary"], *users]))}

    a = MemoryRouter(config, store=store, summarizer=summarize, summary_save_delay_s=60)
    b = MemoryRouter(config, store=store, summarizer=summarize)
    await _finish(a, "first")
    store.fail_after_write = 1
    with pytest.raises(StateStoreError):
        await _finish(a, "X")  # stored, but A cannot know
    for message in ("Y1", "Y2"):
        await _finish(b, message)
    await b.flush(KEY)
    await _finish(a, "Z")  # stale: merges with B's state, in which X is no longer verbatim
    state = await store.load_memory_state(KEY.composite())
    assert state is not None
    kept = [t["user_message"] for part in ("backlog", "pending", "turns") for t in state[part]]
    if rolling:
        assert (state["summary"].split() + kept).count("X") == 1, (state["summary"], kept)
    else:
        assert kept == ["Y2", "Z"]
    assert a.stats.already_saved_turns == 1
    await a.aclose()
    await b.aclose()


# -- turn ids ------------------------------------------------------------------------------


async def _stored_turns(store: Any, key: MemoryKey = KEY) -> list[Mapping[str, Any]]:
    state = await store.load_memory_state(key.composite())
    assert state is not None
    return [*state["pending"], *state["turns"]]


async def test_every_finished_turn_is_stored_with_an_id_of_its_own() -> None:
    store = InMemoryStateStore()
    router = MemoryRouter(_truncation(), store=store)
    for message in ("same", "same", "other"):
        await _finish(router, message)
    ids = [t["turn_id"] for t in await _stored_turns(store)]
    assert len(set(ids)) == 3 and all(isinstance(i, str) and i for i in ids)
    await router.aclose()


@pytest.mark.parametrize(
    "landed", [False, True], ids=["failed-before-writing", "wrote-then-raised"]
)
async def test_a_retried_finish_with_the_same_turn_id_records_the_turn_once(landed: bool) -> None:
    """The caller retries a turn whose finish raised, with the id it gave it: whether the
    failed save wrote or not, the store ends with the turn once, and the turn after it."""
    store = _FailingSaves()
    router = MemoryRouter(_truncation(), store=store)
    await _finish(router, "first")
    if landed:
        store.fail_after_write = 1
    else:
        store.fail_before_write = 1
    for attempt in range(2):
        async with router.turn(memory_key=KEY) as turn:
            if attempt == 0:
                with pytest.raises(StateStoreError):
                    await turn.finish("retried", "ok", turn_id="turn-42")
            else:
                recorded = await turn.finish("retried", "ok", turn_id="turn-42")
    assert recorded is not None and recorded.turn_id == "turn-42"
    await _finish(router, "next")
    stored = await _stored_turns(store)
    assert [t["user_message"] for t in stored] == ["first", "retried", "next"]
    assert [t["turn_id"] for t in stored].count("turn-42") == 1
    assert router.stats.repeated_turns == 1
    assert router.stats.turns_recorded == 3
    # A new router on the same store: the id is found in the hydrated memory.
    again = MemoryRouter(_truncation(), store=store)
    async with again.turn(memory_key=KEY) as turn:
        await turn.finish("retried", "ok", turn_id="turn-42")
    assert [t["user_message"] for t in await _stored_turns(store)] == ["first", "retried", "next"]
    assert again.stats.repeated_turns == 1 and again.stats.turns_recorded == 0
    await router.aclose()
    await again.aclose()


async def test_a_new_turn_id_records_a_new_turn_with_the_same_messages() -> None:
    store = InMemoryStateStore()
    router = MemoryRouter(_truncation(), store=store)
    for turn_id in ("a", "b", "a"):
        async with router.turn(memory_key=KEY) as turn:
            await turn.finish("same", "same", turn_id=turn_id)
    assert [t["turn_id"] for t in await _stored_turns(store)] == ["a", "b"]
    assert router.stats.repeated_turns == 1
    await router.aclose()


@pytest.mark.parametrize(
    "bad", [1, "", "x" * 257, "\ud800"], ids=["int", "empty", "long", "surrogate"]
)
async def test_a_bad_turn_id_is_refused_before_anything_is_recorded(bad: Any) -> None:
    store = InMemoryStateStore()
    router = MemoryRouter(_truncation(), store=store)
    await _finish(router, "first")
    async with router.turn(memory_key=KEY) as turn:
        with pytest.raises(TypeError, match="turn_id"):
            await turn.finish("second", "ok", turn_id=bad)
        assert turn.status == "open"  # still open: it can be finished properly
        await turn.finish("second", "ok", turn_id="good")
    assert [t["user_message"] for t in await _stored_turns(store)] == ["first", "second"]
    await router.aclose()


@pytest.mark.parametrize("failing", [False, True], ids=["lands", "fails"])
async def test_flush_of_a_key_being_evicted_waits_for_its_final_save(failing: bool) -> None:
    """A turn on another key evicts ``KEY`` while ``KEY``'s save is held: ``flush(KEY)``
    and ``flush()`` return once the eviction's save has landed, not at once because the
    key is no longer held, and raise what it raised when it failed."""
    store = _GatedSaves()
    router = MemoryRouter(_truncation(), store=store, max_memories=1)
    await _finish(router, "a1")
    store.holding, store.failing = True, failing
    saving = asyncio.ensure_future(_finish(router, "a2"))
    await store.entered.wait()
    saving.cancel()  # its save goes on, held; the key is free to evict
    with pytest.raises(asyncio.CancelledError):
        await saving
    evicting = asyncio.ensure_future(_finish(router, "b1", key=MemoryKey("t", "u", "other")))
    for _ in range(20):  # it takes KEY off the list and waits for the save in flight
        await asyncio.sleep(0)
    assert KEY not in router.loaded_keys() and KEY.composite() in router._evicting
    flushes = [asyncio.ensure_future(router.flush(KEY)), asyncio.ensure_future(router.flush())]
    await asyncio.sleep(0.02)
    assert not any(f.done() for f in flushes), "flush returned before the eviction's save"
    store.gate.set()
    await evicting  # an eviction that fails is logged, not raised into the turn
    outcomes = await asyncio.gather(*flushes, return_exceptions=True)
    if failing:
        assert [type(o) for o in outcomes] == [StateStoreError, StateStoreError], outcomes
        assert await _stored_users(store) == ["a1"] and router.stats.lost_turns == 1
    else:
        assert outcomes == [None, None]
        assert await _stored_users(store) == ["a1", "a2"]
    await router.aclose()


class _SlowAfterStoring(DefaultShortTermMemory):
    """An ``add_turn`` that does I/O after its write landed (a reply on its way), while
    ``slow`` is set."""

    slow = False

    async def add_turn(self, turn: ConversationTurn) -> None:
        await super().add_turn(turn)
        if self.slow:
            await asyncio.sleep(0.5)


async def test_a_turn_stored_by_a_finish_cancelled_after_its_write_is_saved() -> None:
    """``finish()`` cancelled once the memory stored the turn, before ``add_turn``
    returned: the documented retry with the same ``turn_id`` finds the turn held and does
    not add it again, but the key's save still writes it; the turn is never lost."""
    made: list[_SlowAfterStoring] = []

    def factory(key: MemoryKey) -> _SlowAfterStoring:
        made.append(_SlowAfterStoring(config=_truncation(), key=key))
        return made[-1]

    store = InMemoryStateStore()
    router = MemoryRouter(_truncation(), store=store, memory_factory=factory)
    async with router.turn(memory_key=KEY) as turn:
        await turn.finish("first", "ok", turn_id="t1")

    async def second() -> None:
        async with router.turn(memory_key=KEY) as turn:
            made[-1].slow = True
            await turn.finish("second", "ok", turn_id="t2")

    task = asyncio.ensure_future(second())
    await asyncio.sleep(0.1)  # stored; add_turn not returned yet
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    made[-1].slow = False
    async with router.turn(memory_key=KEY) as turn:  # the retry
        await turn.finish("second", "ok", turn_id="t2")
    assert router.stats.repeated_turns == 1
    assert await _stored_users(store) == ["first", "second"]
    await router.aclose()


async def test_a_flush_of_every_key_keeps_each_from_eviction_until_it_is_flushed() -> None:
    """``flush()`` of every key, waiting on one key's summary, while a turn on a new key
    would evict another key it has still to flush: that key is in use and stays, and the
    flush saves it, raising what its save raises, rather than return with it evicted and
    its turn lost unseen."""
    gate = asyncio.Event()

    async def summarizer(payload: Any) -> dict[str, str]:
        await gate.wait()
        return {"summary": "s"}

    class FailingFor(InMemoryStateStore):
        def __init__(self) -> None:
            super().__init__()
            self.failing: set[str] = set()

        async def save_memory_state_if(
            self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
        ) -> None:
            if key in self.failing:
                raise StateStoreError("disk full", key=key)
            await super().save_memory_state_if(key, state, expected_revision=expected_revision)

    a, b, c = (MemoryKey("t", "u", name) for name in "abc")
    store = FailingFor()
    cfg = ShortTermMemoryConfig(strategy="rolling_summary", budget=MemoryBudget(full_zone_turns=1))
    router = MemoryRouter(cfg, store=store, summarizer=summarizer, max_memories=2)
    await _finish(router, "a1", key=a)
    await _finish(router, "a2", key=a)  # a1 evicted: its summary waits for the gate
    store.failing.add(b.composite())
    with pytest.raises(StateStoreError):
        await _finish(router, "b1", key=b)  # kept in memory, unsaved
    flushing = asyncio.ensure_future(router.flush())  # waits on a, then b
    await asyncio.sleep(0.05)
    await _finish(router, "c1", key=c)
    assert b in router.loaded_keys(), "a key the flush has still to save was evicted"
    gate.set()
    with pytest.raises(StateStoreError):
        await flushing
    store.failing.clear()
    await router.aclose()
    assert await _stored_users(store, b) == ["b1"] and router.stats.lost_turns == 0
