"""Behaviour specific to the SQLite store: files, corruption, locking, processes."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from stm_stores import CorruptStateError, SQLiteStateStore, StaleStateError, StateStoreError

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
        ]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        key, revision, text, updated_at = conn.execute("SELECT * FROM memory_state").fetchone()
    assert (key, revision, text) == (KEY, 4, '{"revision":4}')
    assert isinstance(updated_at, float)


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
            conn.execute("INSERT INTO memory_state VALUES (?, ?, ?, 0.0)", (KEY, revision, text))
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


def _remove(db_path: Path) -> None:
    """Delete the database and its WAL files, as an operator or a cleanup job might."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
