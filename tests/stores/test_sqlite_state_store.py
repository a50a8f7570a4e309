"""Behaviour specific to the SQLite store: files, corruption, locking, processes."""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from stm_stores import (
    CorruptStateError,
    InvalidStateError,
    SQLiteStateStore,
    StaleStateError,
    StateStoreError,
)

pytestmark = pytest.mark.anyio

KEY = "kv:v1:tenant:é"


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain autocommit connection, for writing what the store never would."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        yield conn


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


async def test_table_schema_and_wal_mode(db_path: Path) -> None:
    async with SQLiteStateStore(db_path) as store:
        await store.save_memory_state(KEY, {"revision": 4})
    with raw(db_path) as conn:
        columns = [
            (name, kind, notnull, pk)
            for _, name, kind, notnull, _, pk in conn.execute("PRAGMA table_info(memory_state)")
        ]
        assert columns == [
            ("key", "TEXT", 0, 1),
            ("revision", "INTEGER", 1, 0),
            ("state", "TEXT", 1, 0),
            ("updated_at", "REAL", 1, 0),
            ("layout", "TEXT", 0, 0),
            ("stamp", "INTEGER", 0, 0),
        ]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        key, revision, text, updated_at, layout, stamp = conn.execute(
            "SELECT * FROM memory_state"
        ).fetchone()
    assert (key, revision, text, layout) == (KEY, 4, '{"revision":4}', None)
    assert isinstance(updated_at, float) and isinstance(stamp, int)


async def test_state_survives_reopening(db_path: Path) -> None:
    async with SQLiteStateStore(db_path) as store:
        await store.save_memory_state(KEY, {"revision": 1, "turns": ["a"]})
    async with SQLiteStateStore(db_path) as store:
        assert await store.load_memory_state(KEY) == {"revision": 1, "turns": ["a"]}


async def test_two_stores_on_one_file_share_records(db_path: Path) -> None:
    async with SQLiteStateStore(db_path) as first, SQLiteStateStore(db_path) as second:
        await first.save_memory_state_if(KEY, {"revision": 1}, expected_revision=None)
        with pytest.raises(StaleStateError):
            await second.save_memory_state_if(KEY, {"revision": 1}, expected_revision=None)
        await second.save_memory_state_if(KEY, {"revision": 2}, expected_revision=1)
        assert await first.load_memory_state(KEY) == {"revision": 2}


@pytest.mark.parametrize(
    ("revision", "text"),
    [
        (0, "{not json"),
        (0, ""),
        (0, "[1, 2]"),
        (0, '"text"'),
        (0, "null"),
        (0, b'{"revision": 0}'),
        (2, '{"revision": 1}'),
        (1, "{}"),
        ("one", '{"revision": 1}'),
        (0, '{"revision": "0"}'),
        (-1, '{"revision": -1}'),
    ],
)
async def test_corrupt_row_is_reported(db_path: Path, revision: Any, text: Any) -> None:
    async with SQLiteStateStore(db_path) as store:
        await store.save_memory_state("healthy", {"revision": 1})
        with raw(db_path) as conn:
            conn.execute(
                "INSERT INTO memory_state (key, revision, state, updated_at) VALUES (?, ?, ?, 0)",
                (KEY, revision, text),
            )
        with pytest.raises(CorruptStateError) as raised:
            await store.load_memory_state(KEY)
        assert raised.value.key == KEY
        assert repr(KEY) in str(raised.value)
        # A conditional save must not replace what it could not read.
        for expected in (None, 0, 1, 2):
            with pytest.raises(CorruptStateError):
                await store.save_memory_state_if(KEY, {"revision": 3}, expected_revision=expected)
        with raw(db_path) as conn:
            assert conn.execute(
                "SELECT revision, state FROM memory_state WHERE key = ?", (KEY,)
            ).fetchone() == (revision, text)
        assert await store.load_memory_state("healthy") == {"revision": 1}
        assert await store.keys() == sorted([KEY, "healthy"])
        # An unconditional save is a deliberate overwrite, the way to repair a record.
        await store.save_memory_state(KEY, {"revision": 5})
        assert await store.load_memory_state(KEY) == {"revision": 5}


async def test_closed_store_refuses_operations(db_path: Path) -> None:
    store = SQLiteStateStore(db_path)
    await store.save_memory_state(KEY, {"revision": 1})
    await store.aclose()
    store.close()
    with pytest.raises(StateStoreError, match="closed") as raised:
        await store.load_memory_state(KEY)
    assert raised.value.key == KEY
    with pytest.raises(StateStoreError, match="closed"):
        await store.keys()


async def test_unopenable_path_is_wrapped(tmp_path: Path) -> None:
    async with SQLiteStateStore(tmp_path / "missing-dir" / "state.db") as store:
        with pytest.raises(StateStoreError) as raised:
            await store.save_memory_state(KEY, {"revision": 1})
    assert raised.value.key == KEY
    assert repr(KEY) in str(raised.value)
    assert isinstance(raised.value.__cause__, sqlite3.Error)


async def test_lock_timeout_is_wrapped_and_writes_nothing(db_path: Path) -> None:
    async with SQLiteStateStore(db_path, timeout_s=0.1) as store:
        await store.save_memory_state(KEY, {"revision": 1})
        with raw(db_path) as other:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StateStoreError, match="locked") as raised:
                await store.save_memory_state_if(KEY, {"revision": 2}, expected_revision=1)
            assert raised.value.key == KEY
            assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
            other.execute("ROLLBACK")
        assert await store.load_memory_state(KEY) == {"revision": 1}
        await store.save_memory_state_if(KEY, {"revision": 2}, expected_revision=1)
        assert await store.load_memory_state(KEY) == {"revision": 2}


async def test_first_open_waits_for_a_writer_on_a_new_file(db_path: Path) -> None:
    # Switching a file to WAL needs the write lock and fails at once, ignoring the
    # busy timeout, while another connection holds it: what two processes opening
    # one new file together run into.
    with raw(db_path) as other:
        other.execute("CREATE TABLE unrelated (x)")
        other.execute("BEGIN IMMEDIATE")
        loaded: list[dict[str, Any] | None] = []
        async with SQLiteStateStore(db_path, timeout_s=10) as store:

            async def load() -> None:
                loaded.append(await store.load_memory_state(KEY))

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(load)
                await anyio.sleep(0.2)
                assert loaded == []
                other.execute("ROLLBACK")
            assert loaded == [None]
            await store.save_memory_state(KEY, {"revision": 1})
    with raw(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_first_open_gives_up_after_the_timeout(db_path: Path) -> None:
    with raw(db_path) as other:
        other.execute("CREATE TABLE unrelated (x)")
        other.execute("BEGIN IMMEDIATE")
        async with SQLiteStateStore(db_path, timeout_s=0.1) as store:
            with pytest.raises(StateStoreError, match="locked") as raised:
                await store.load_memory_state(KEY)
        other.execute("ROLLBACK")
    assert raised.value.key == KEY
    assert isinstance(raised.value.__cause__, sqlite3.OperationalError)


INCREMENTS_PER_PROCESS = 50


def increment_counter(path: str, key: str, count: int, start: Any) -> None:
    """Process body: ``count`` read-modify-conditional-write increments, retrying."""
    start.wait(60)
    anyio.run(_increment_counter, path, key, count)


async def _increment_counter(path: str, key: str, count: int) -> None:
    async with SQLiteStateStore(path) as store:
        done = 0
        while done < count:
            current = await store.load_memory_state(key)
            revision = None if current is None else current["revision"]
            counter = 0 if current is None else current["counter"]
            new = {"revision": (revision or 0) + 1, "counter": counter + 1}
            try:
                await store.save_memory_state_if(key, new, expected_revision=revision)
            except StaleStateError:
                continue
            done += 1


def test_conditional_saves_are_atomic_across_processes(db_path: Path) -> None:
    async def create_schema() -> None:
        async with SQLiteStateStore(db_path) as store:
            assert await store.keys() == []

    # Create the file and schema up front so the workers only race on the key.
    anyio.run(create_schema)
    context = multiprocessing.get_context("spawn")
    # A barrier, not an event: spawned processes take a while to import, and the
    # increments only contend if both workers start them together.
    start = context.Barrier(2)
    workers = [
        context.Process(
            target=increment_counter, args=(str(db_path), KEY, INCREMENTS_PER_PROCESS, start)
        )
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    for worker in workers:
        if worker.is_alive():
            worker.kill()
            worker.join()
    assert [worker.exitcode for worker in workers] == [0, 0]

    async def final_state() -> dict[str, Any] | None:
        async with SQLiteStateStore(db_path) as store:
            return await store.load_memory_state(KEY)

    total = 2 * INCREMENTS_PER_PROCESS
    assert anyio.run(final_state) == {"revision": total, "counter": total}


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_database_file_gone_while_open_fails_loudly(
    db_path: Path, tmp_path: Path, how: str
) -> None:
    store = SQLiteStateStore(db_path)
    await store.save_memory_state("k", {"version": 2, "revision": 1})
    _remove(db_path)
    if how == "replaced":
        other = SQLiteStateStore(db_path)  # a new file at the same path
        await other.save_memory_state("k", {"version": 2, "revision": 7})
        other.close()
    with pytest.raises(StateStoreError, match="deleted or replaced while open") as gone:
        await store.save_memory_state("k", {"version": 2, "revision": 2})
    assert gone.value.key == "k"
    with pytest.raises(StateStoreError, match="deleted or replaced"):
        await store.load_memory_state("k")
    store.close()
    if how == "replaced":  # the new file was not written to by the old store
        fresh = SQLiteStateStore(db_path)
        assert (await fresh.load_memory_state("k"))["revision"] == 7
        fresh.close()


async def test_a_relative_path_is_checked_where_it_was_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SQLiteStateStore("state.db")
    await store.save_memory_state("k", {"version": 2, "revision": 1})
    monkeypatch.chdir(tmp_path.parent)  # the process moves; the file did not
    await store.save_memory_state("k", {"version": 2, "revision": 2})
    assert (await store.load_memory_state("k"))["revision"] == 2
    store.close()


async def test_a_relative_path_is_opened_where_the_store_was_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The process moves before the first use: the store opens the file it will check.
    (tmp_path / "made").mkdir()
    (tmp_path / "used").mkdir()
    monkeypatch.chdir(tmp_path / "made")
    store = SQLiteStateStore("state.db")
    monkeypatch.chdir(tmp_path / "used")
    await store.save_memory_state("k", {"version": 2, "revision": 1})
    assert (tmp_path / "made" / "state.db").is_file()
    assert not (tmp_path / "used" / "state.db").exists()
    _remove(tmp_path / "made" / "state.db")
    with pytest.raises(StateStoreError, match="deleted or replaced while open"):
        await store.save_memory_state("k", {"version": 2, "revision": 2})
    store.close()


async def test_a_save_queued_when_the_store_closes_fails_and_starts_no_thread(
    db_path: Path,
) -> None:
    store = SQLiteStateStore(db_path)
    await store.save_memory_state("warm", {"revision": 1})
    release = threading.Event()
    blocker = asyncio.create_task(store._worker.run(release.wait))  # the thread is busy
    await asyncio.sleep(0)
    leading = asyncio.create_task(store.save_memory_state("a", {"revision": 1}))
    queued = asyncio.create_task(store.save_memory_state("b", {"revision": 1}))
    for _ in range(100):  # the first leads a transaction, the second waits for the next
        await asyncio.sleep(0)
        if store._queue:
            break
    assert store._queue and store._batch_ended is not None
    store.close()  # the thread ends once the calls queued so far have run
    release.set()
    await blocker
    for task in (leading, queued):
        with pytest.raises(StateStoreError, match="store is closed"):
            await task
    for thread in threading.enumerate():
        if thread.name.startswith("stm-sqlite"):
            thread.join(timeout=2)
            assert not thread.is_alive(), "a thread started for a save after the close"
    async with SQLiteStateStore(db_path) as reader:
        assert await reader.keys() == ["warm"]


@pytest.mark.parametrize("timeout_s", [-1, math.nan, math.inf, None, "5", True])
def test_a_bad_timeout_is_refused_when_the_store_is_made(timeout_s: Any) -> None:
    with pytest.raises(ValueError, match="timeout_s must be a finite number >= 0"):
        SQLiteStateStore(timeout_s=timeout_s)


def _remove(db_path: Path) -> None:
    """Delete the database and its WAL files, as an operator or a cleanup job might."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)


# -- turn rows -------------------------------------------------------------------------


def turn(seq: int, text: str = "", **fields: Any) -> dict[str, Any]:
    return {"seq": seq, "user_message": f"u{seq}{text}", "assistant_response": "a", **fields}


def memory_state(revision: int, turns: list[int], pending: tuple[int, ...] = ()) -> dict[str, Any]:
    return {
        "version": 2,
        "revision": revision,
        "summary": "résumé 😀",
        "turns": [turn(s) for s in turns],
        "pending": [turn(s) for s in pending],
        "backlog": [],
    }


@contextmanager
def written_turns(path: Path) -> Iterator[list[int]]:
    """The seqs of every turn row written while the block runs (a trigger records them)."""
    with raw(path) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS audit (seq INTEGER)")
        conn.execute("DELETE FROM audit")
        conn.execute(
            "CREATE TRIGGER IF NOT EXISTS audit_turn AFTER INSERT ON memory_turn "
            "BEGIN INSERT INTO audit VALUES (new.seq); END"
        )
    seqs: list[int] = []
    yield seqs
    with raw(path) as conn:
        seqs += [row[0] for row in conn.execute("SELECT seq FROM audit")]
        conn.execute("DROP TRIGGER audit_turn")


def stored_seqs(path: Path) -> list[int]:
    with raw(path) as conn:
        return [row[0] for row in conn.execute("SELECT seq FROM memory_turn WHERE key = ?", (KEY,))]


async def test_a_memory_state_is_kept_one_row_per_turn_and_a_save_writes_the_change(
    db_path: Path,
) -> None:
    async with SQLiteStateStore(db_path) as store:
        first = memory_state(1, [1, 2, 3])
        assert await store.keys() == []  # opens the file
        with written_turns(db_path) as written:
            await store.save_memory_state_if(KEY, first, expected_revision=None)
        assert sorted(written) == [1, 2, 3]
        # One more turn; turn 1 moves to pending: only turn 4 is written.
        second = memory_state(2, [2, 3, 4], pending=(1,))
        with written_turns(db_path) as written:
            await store.save_memory_state_if(KEY, second, expected_revision=1)
        assert written == [4]
        assert await store.load_memory_state(KEY) == second
        # A summary covers turn 1 and turn 3 changes under its seq: 3 is rewritten, 1 goes.
        third = memory_state(3, [2, 3, 4])
        third["turns"][1]["user_message"] = "edited ✓"
        with written_turns(db_path) as written:
            await store.save_memory_state_if(KEY, third, expected_revision=2)
        assert written == [3]
        assert sorted(stored_seqs(db_path)) == [2, 3, 4]
    async with SQLiteStateStore(db_path) as reopened:
        assert await reopened.load_memory_state(KEY) == third


async def test_a_turn_changed_in_place_after_a_save_is_written_again(db_path: Path) -> None:
    """The store keeps a copy of each turn to compare the next save with. The copy shares
    the turn's keys and strings (a turn given again compares in a few reads) but not its
    containers, so a caller that changes a turn it gave, in place, is still seen."""
    async with SQLiteStateStore(db_path) as store:
        state = memory_state(1, [1, 2, 3])
        state["turns"][0]["artifacts_shown"] = {"k": ["v"]}
        await store.save_memory_state_if(KEY, state, expected_revision=None)
        given, kept = state["turns"][1], store._rows[KEY].turns[2][0]
        assert kept == given and kept is not given
        assert kept["user_message"] is given["user_message"]
        assert all(a is b for a, b in zip(kept, given, strict=True))  # the keys
        first = store._rows[KEY].turns[1][0]
        assert first["artifacts_shown"] is not state["turns"][0]["artifacts_shown"]

        state["revision"] = 2
        state["turns"][0]["artifacts_shown"]["k"].append("w")  # nested, in place
        state["turns"][2]["user_message"] = "changed"
        with written_turns(db_path) as written:
            await store.save_memory_state_if(KEY, state, expected_revision=1)
        assert sorted(written) == [1, 3]
        assert await store.load_memory_state(KEY) == state


@pytest.mark.parametrize(("first", "then"), [(1, True), (1, 1.0), (0.0, -0.0), (False, 0)])
async def test_a_turn_changed_to_an_equal_value_of_another_type_is_written(
    db_path: Path, first: Any, then: Any
) -> None:
    """``1 == True == 1.0`` and ``0.0 == -0.0``, but their JSON differs: a turn that changed
    from one to the other under its seq, given in a new dict (as from ``to_dict()`` or a
    memory's ``from_dict``), is written."""
    async with SQLiteStateStore(db_path) as store:
        state = memory_state(1, [1, 2])
        state["turns"][0]["artifacts_shown"] = {"x": first}
        await store.save_memory_state_if(KEY, state, expected_revision=None)
        again = json.loads(json.dumps(state))  # new dicts, as from to_dict()
        again["revision"] = 2
        again["turns"][0]["artifacts_shown"] = {"x": then}
        with written_turns(db_path) as written:
            await store.save_memory_state_if(KEY, again, expected_revision=1)
        assert written == [1]
    async with SQLiteStateStore(db_path) as reopened:
        loaded = await reopened.load_memory_state(KEY)
    assert loaded is not None
    assert repr(loaded["turns"][0]["artifacts_shown"]["x"]) == repr(then)


@pytest.mark.parametrize("value", ["1", "sNaN"], ids=["equal", "comparing-raises"])
async def test_a_value_no_store_can_keep_is_refused_though_it_equals_the_stored_one(
    db_path: Path, value: str
) -> None:
    """A ``Decimal`` equal to the stored number is refused as a store without that turn
    would refuse it, and so is a signalling-NaN ``Decimal``, whose comparison raises
    (``InvalidStateError``, not ``decimal.InvalidOperation``); the record is left as it
    was."""
    from decimal import Decimal

    async with SQLiteStateStore(db_path) as store:
        state = memory_state(1, [1])
        state["turns"][0]["artifacts_shown"] = {"x": 1}
        await store.save_memory_state_if(KEY, state, expected_revision=None)
        bad = json.loads(json.dumps(state))
        bad["revision"] = 2
        bad["turns"][0]["artifacts_shown"] = {"x": Decimal(value)}
        with pytest.raises(InvalidStateError):
            await store.save_memory_state_if(KEY, bad, expected_revision=1)
        assert await store.load_memory_state(KEY) == state


async def test_a_conditional_save_refuses_a_record_whose_turn_rows_are_damaged(
    db_path: Path,
) -> None:
    """A record whose turn row no longer decodes is corrupt for a load, and so for a
    conditional save by a store that did not write it last: ``CorruptStateError``, the
    record left as it is (never silently replaced)."""
    async with SQLiteStateStore(db_path) as writer:
        await writer.save_memory_state_if(KEY, memory_state(1, [1, 2]), expected_revision=None)
    with raw(db_path) as conn:
        conn.execute("UPDATE memory_turn SET turn = '{not json' WHERE seq = 2")
    async with SQLiteStateStore(db_path) as other:
        with pytest.raises(CorruptStateError):
            await other.save_memory_state_if(KEY, memory_state(2, [1, 2, 3]), expected_revision=1)
        with pytest.raises(CorruptStateError):
            await other.load_memory_state(KEY)
        # An unconditional save repairs it, as documented.
        await other.save_memory_state(KEY, memory_state(2, [1, 2, 3]))
        assert await other.load_memory_state(KEY) == memory_state(2, [1, 2, 3])


async def test_a_turn_too_deep_to_compare_from_where_it_is_saved_is_refused_typed(
    db_path: Path,
) -> None:
    """Saved again from deeper in the stack, a turn nested near Python's limit cannot be
    compared with the kept copy: the save fails as a first save of it would, with
    ``InvalidStateError``, not a bare ``RecursionError``."""
    nested: list[Any] = []
    for _ in range(sys.getrecursionlimit() - 100):
        nested = [nested]
    state = {"revision": 1, "turns": [{"seq": 1, "deep": nested}]}

    async def deeper(frames: int) -> None:
        if frames:
            return await deeper(frames - 1)
        await store.save_memory_state(KEY, state)

    async with SQLiteStateStore(db_path) as store:
        await store.save_memory_state(KEY, state)
        with pytest.raises(InvalidStateError):
            await deeper(150)
        await store.save_memory_state(KEY, memory_state(2, [1]))
        assert await store.load_memory_state(KEY) == memory_state(2, [1])


async def test_a_full_disk_fails_every_write_of_the_batch_with_that_cause(
    db_path: Path,
) -> None:
    """SQLite ends the whole transaction when the disk is full: every write sharing it
    fails with that cause, and none lands."""
    async with SQLiteStateStore(db_path) as store:
        await store.save_memory_state("a", memory_state(1, [1]))
        await store.save_memory_state("b", memory_state(1, [1]))
        conn = store._conn
        assert conn is not None
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count={pages + 3}")  # a nearly full disk
        big = memory_state(2, [1, 2])
        big["turns"][1]["user_message"] = "x" * 200_000
        outcomes = await asyncio.gather(
            store.save_memory_state("first", {"revision": 0}),  # the others batch behind it
            store.save_memory_state_if("a", memory_state(2, [1, 2]), expected_revision=1),
            store.save_memory_state_if("b", big, expected_revision=1),
            store.save_memory_state_if("c", memory_state(1, [1]), expected_revision=None),
            return_exceptions=True,
        )
        conn.execute("PRAGMA max_page_count=1000000")
        failed = [o for o in outcomes[1:] if isinstance(o, StateStoreError)]
        assert len(failed) == 3, outcomes
        assert all("database or disk is full" in str(error) for error in failed), failed
        assert await store.load_memory_state("a") == memory_state(1, [1])
        assert await store.load_memory_state("b") == memory_state(1, [1])
        assert await store.load_memory_state("c") is None


async def test_a_loaded_state_shares_text_with_the_store_but_not_containers(
    db_path: Path,
) -> None:
    """A load gives the caller containers of its own over the strings the store keeps, and
    the kept turns' keys are interned: a memory loaded from the state and giving it back
    compares in a few reads, and a caller changing what it loaded is still seen."""
    async with SQLiteStateStore(db_path) as writer:
        state = memory_state(1, [1, 2])
        state["turns"][0]["artifacts_shown"] = {"k": ["v"]}
        await writer.save_memory_state_if(KEY, state, expected_revision=None)
    async with SQLiteStateStore(db_path) as store:
        loaded = await store.load_memory_state(KEY)
        assert loaded == state
        kept = store._rows[KEY].turns[1][0]
        assert loaded["turns"][0]["user_message"] is kept["user_message"]
        assert loaded["turns"][0]["artifacts_shown"] is not kept["artifacts_shown"]
        assert loaded["turns"][0]["artifacts_shown"]["k"] is not kept["artifacts_shown"]["k"]
        assert all(k is sys.intern(k) for k in kept)

        loaded["revision"] = 2
        loaded["turns"][0]["artifacts_shown"]["k"].append("w")
        with written_turns(db_path) as written:
            await store.save_memory_state_if(KEY, loaded, expected_revision=1)
        assert written == [1]
        assert await store.load_memory_state(KEY) == loaded


async def test_a_turn_nested_deeper_than_python_frames_is_kept(db_path: Path) -> None:
    """JSON's encoder takes nesting that copying the turn frame by frame cannot: the store
    then keeps the plain decoded copy rather than failing the save."""
    nested: list[Any] = []
    for _ in range(900):
        nested = [nested]
    async with SQLiteStateStore(db_path) as store:
        state = memory_state(1, [1])
        state["turns"][0]["artifacts_shown"] = {"deep": nested}
        await store.save_memory_state_if(KEY, state, expected_revision=None)
        assert await store.load_memory_state(KEY) == state


class _EqualToAnything(str):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


async def test_the_kept_copy_shares_only_plain_values(db_path: Path) -> None:
    """A ``str`` subclass can claim to equal anything: the copy holds the plain string
    decoded from it, so a later change of that field is still written."""
    async with SQLiteStateStore(db_path) as store:
        state = memory_state(1, [1])
        state["turns"][0]["user_message"] = _EqualToAnything("sly")
        await store.save_memory_state_if(KEY, state, expected_revision=None)
        assert type(store._rows[KEY].turns[1][0]["user_message"]) is str
        changed = memory_state(2, [1])
        changed["turns"][0]["user_message"] = "plain"
        with written_turns(db_path) as written:
            await store.save_memory_state_if(KEY, changed, expected_revision=1)
        assert written == [1]
        assert await store.load_memory_state(KEY) == changed


async def test_another_writer_in_between_makes_the_next_save_rewrite_every_turn(
    db_path: Path,
) -> None:
    async with SQLiteStateStore(db_path) as first, SQLiteStateStore(db_path) as second:
        await first.save_memory_state(KEY, memory_state(1, [1, 2]))
        # Same revision, different turn under seq 1: only the stamp tells them apart.
        other = memory_state(1, [1, 2])
        other["turns"][0]["assistant_response"] = "the other writer's"
        await second.save_memory_state(KEY, other)
        mine = memory_state(1, [1, 2, 3])
        with written_turns(db_path) as written:
            await first.save_memory_state(KEY, mine)
        assert sorted(written) == [1, 2, 3]
        assert await second.load_memory_state(KEY) == mine
        # After reading, the reader's next save writes only the change.
        with written_turns(db_path) as written:
            await second.save_memory_state_if(KEY, memory_state(2, [2, 3, 4]), expected_revision=1)
        assert written == [4]
        assert await first.load_memory_state(KEY) == memory_state(2, [2, 3, 4])
        assert sorted(stored_seqs(db_path)) == [2, 3, 4]


async def test_a_store_that_forgot_a_key_rewrites_its_rows(db_path: Path) -> None:
    async with SQLiteStateStore(db_path, cached_keys=1) as store:
        await store.save_memory_state(KEY, memory_state(1, [1, 2]))
        await store.save_memory_state("other", memory_state(1, [1]))  # KEY is forgotten
        with written_turns(db_path) as written:
            await store.save_memory_state(KEY, memory_state(2, [1, 2]))
        assert sorted(written) == [1, 2]
        assert await store.load_memory_state(KEY) == memory_state(2, [1, 2])
    with pytest.raises(ValueError, match="cached_keys"):
        SQLiteStateStore(db_path, cached_keys=-1)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"score": math.nan}, id="nan"),
        pytest.param({"pair": (1, 2)}, id="tuple"),
        pytest.param({"map": {1: "x"}}, id="int-key"),
        pytest.param({"text": "\ud800"}, id="lone-surrogate"),
    ],
)
async def test_a_turn_no_store_can_keep_is_refused_and_nothing_is_written(
    db_path: Path, bad: dict[str, Any]
) -> None:
    async with SQLiteStateStore(db_path) as store:
        await store.save_memory_state(KEY, memory_state(1, [1, 2]))
        refused = memory_state(2, [1, 2, 3])
        refused["turns"][2].update(bad)
        with written_turns(db_path) as written, pytest.raises(InvalidStateError):
            await store.save_memory_state_if(KEY, refused, expected_revision=1)
        assert written == []
        assert await store.load_memory_state(KEY) == memory_state(1, [1, 2])


@pytest.mark.parametrize(
    "state",
    [
        pytest.param({"revision": 1, "turns": [turn(1), turn(1)]}, id="seq-twice"),
        pytest.param({"revision": 1, "turns": [turn(1), {"seq": True}]}, id="bool-seq"),
        pytest.param({"revision": 1, "turns": [turn(1), ["not", "a", "turn"]]}, id="non-object"),
        pytest.param({"revision": 1, "turns": (turn(1),)}, id="tuple-list"),
    ],
)
async def test_other_states_are_kept_whole(db_path: Path, state: dict[str, Any]) -> None:
    async with SQLiteStateStore(db_path) as store:
        await store.save_memory_state(KEY, memory_state(1, [1, 2]))
        if isinstance(state["turns"], tuple):
            with pytest.raises(InvalidStateError):
                await store.save_memory_state(KEY, state)
            return
        await store.save_memory_state(KEY, state)
        assert stored_seqs(db_path) == []
        assert await store.load_memory_state(KEY) == state


@pytest.mark.parametrize(
    "damage",
    [
        "DELETE FROM memory_turn WHERE seq = 2",
        "UPDATE memory_turn SET turn = '{not json' WHERE seq = 2",
        "UPDATE memory_turn SET turn = '{\"seq\": 9}' WHERE seq = 2",
        "UPDATE memory_state SET layout = '[1, 2]'",
        'UPDATE memory_state SET layout = \'{"turns": ["1"]}\'',
        f"UPDATE memory_state SET layout = '{'[' * 100_000}{']' * 100_000}'",
    ],
)
async def test_damaged_turn_rows_are_reported(db_path: Path, damage: str) -> None:
    async with SQLiteStateStore(db_path) as store:
        await store.save_memory_state(KEY, memory_state(1, [1, 2]))
        with raw(db_path) as conn:
            conn.execute(damage)
        with pytest.raises(CorruptStateError) as raised:
            await store.load_memory_state(KEY)
        assert raised.value.key == KEY
        # Repaired by an unconditional save.
        await store.save_memory_state(KEY, memory_state(2, [1, 2]))
        assert await store.load_memory_state(KEY) == memory_state(2, [1, 2])


async def test_a_file_of_the_first_table_version_is_read_and_upgraded(db_path: Path) -> None:
    whole = memory_state(3, [1, 2])
    with raw(db_path) as conn:
        conn.execute(
            "CREATE TABLE memory_state (key TEXT PRIMARY KEY, revision INTEGER NOT NULL, "
            "state TEXT NOT NULL, updated_at REAL NOT NULL)"
        )
        conn.execute("INSERT INTO memory_state VALUES (?, 3, ?, 0.0)", (KEY, json.dumps(whole)))
    async with SQLiteStateStore(db_path) as store:
        assert await store.load_memory_state(KEY) == whole
        await store.save_memory_state_if(KEY, memory_state(4, [1, 2, 3]), expected_revision=3)
        assert await store.load_memory_state(KEY) == memory_state(4, [1, 2, 3])
    assert sorted(stored_seqs(db_path)) == [1, 2, 3]


# -- batched writes ------------------------------------------------------------------------


async def test_saves_made_at_once_share_transactions_and_each_gets_its_own_outcome(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SQLiteStateStore(db_path) as store:
        for index in range(0, 64, 8):
            await store.save_memory_state(f"k{index}", memory_state(1, [1]))
        batches: list[int] = []
        commit = store._commit

        def counting(batch: list[Any]) -> None:
            batches.append(len(batch))
            commit(batch)

        monkeypatch.setattr(store, "_commit", counting)
        outcomes: dict[int, BaseException | None] = {}

        async def save(index: int) -> None:
            # Every eighth key exists at revision 1: expecting "no record" is stale there.
            try:
                await store.save_memory_state_if(
                    f"k{index}", memory_state(2, [1, 2]), expected_revision=None
                )
            except StaleStateError as exc:
                outcomes[index] = exc
            else:
                outcomes[index] = None

        async with anyio.create_task_group() as group:
            for index in range(64):
                group.start_soon(save, index)
        assert sum(batches) == 64 and len(batches) < 64, batches
        stale = sorted(i for i, outcome in outcomes.items() if outcome is not None)
        assert stale == list(range(0, 64, 8))
        for index in range(64):
            expected = memory_state(1, [1]) if index % 8 == 0 else memory_state(2, [1, 2])
            assert await store.load_memory_state(f"k{index}") == expected


async def test_a_write_cancelled_before_its_transaction_is_not_written(db_path: Path) -> None:
    async with SQLiteStateStore(db_path, timeout_s=10) as store:
        await store.save_memory_state("first", memory_state(1, [1]))
        with raw(db_path) as other:
            other.execute("BEGIN IMMEDIATE")  # the leader's transaction waits for this lock
            async with anyio.create_task_group() as group:
                group.start_soon(store.save_memory_state, "first", memory_state(2, [1, 2]))
                await anyio.sleep(0.05)
                with anyio.move_on_after(0.05) as waited:
                    await store.save_memory_state("second", memory_state(1, [1]))
                assert waited.cancelled_caught
                other.execute("ROLLBACK")
        # The next transaction does not take the cancelled write along either.
        await store.save_memory_state("third", memory_state(1, [1]))
        assert await store.keys() == ["first", "third"]
        assert await store.load_memory_state("first") == memory_state(2, [1, 2])


async def test_a_closed_store_leaves_no_thread_behind(tmp_path: Path) -> None:
    for close in ("aclose", "close"):
        path = tmp_path / f"{close}.db"
        name = f"stm-sqlite:{path.name}"
        store = SQLiteStateStore(path)
        await store.save_memory_state(KEY, memory_state(1, [1]))
        assert any(t.name == name for t in threading.enumerate())
        if close == "aclose":
            await store.aclose()
        else:
            store.close()
        deadline = time.monotonic() + 5  # well under the 10 s an idle thread would linger
        while any(t.name == name for t in threading.enumerate()):
            assert time.monotonic() < deadline, f"{close}() left the store's thread running"
            await anyio.sleep(0.01)
        with pytest.raises(StateStoreError, match="closed"):
            await store.keys()
        with pytest.raises(StateStoreError, match="closed"):
            await store.save_memory_state(KEY, memory_state(2, [1, 2]))
        assert not any(t.name == name for t in threading.enumerate())  # refused at once


async def test_durability_is_full_unless_asked(db_path: Path) -> None:
    for durability, pragma in (("full", 2), ("normal", 1)):
        async with SQLiteStateStore(db_path, durability=durability) as store:  # type: ignore[arg-type]
            await store.save_memory_state(KEY, memory_state(1, [1]))
            assert store._conn is not None
            assert store._conn.execute("PRAGMA synchronous").fetchone() == (pragma,)
    async with SQLiteStateStore(db_path) as store:
        await store.keys()
        assert store._conn is not None
        assert store._conn.execute("PRAGMA synchronous").fetchone() == (2,)
    with pytest.raises(ValueError, match="durability"):
        SQLiteStateStore(db_path, durability="off")  # type: ignore[arg-type]


async def test_a_memory_loaded_with_values_of_other_types_saves_them(db_path: Path) -> None:
    """A memory persisted, then given (``from_dict``) its own state with artifact values
    changed to equal ones of other types, under the same seqs: saved, they load as given."""
    from reference_impl import ConversationTurn, DefaultShortTermMemory, ShortTermMemoryConfig

    config = ShortTermMemoryConfig(strategy="truncation")
    async with SQLiteStateStore(db_path) as store:
        memory = DefaultShortTermMemory(config=config)
        await memory.add_turn(
            ConversationTurn("u", "a", artifacts_shown={"count": 1, "score": 0.0}, ts=1.0)
        )
        await memory.persist(store, KEY)
        edited = json.loads(json.dumps(memory.to_dict()))
        edited["turns"][0]["artifacts_shown"] = {"count": True, "score": -0.0}
        memory.from_dict(edited)
        await store.save_memory_state(KEY, memory.to_dict())
    async with SQLiteStateStore(db_path) as reopened:
        fresh = DefaultShortTermMemory(config=config)
        await fresh.hydrate(reopened, KEY)
    shown = fresh.to_dict()["turns"][0]["artifacts_shown"]
    assert repr(shown) == repr({"count": True, "score": -0.0})
