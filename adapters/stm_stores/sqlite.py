"""An embedded SQLite state store, safe to share between processes.

A memory state's turns are kept one row each, so that saving a state that gained one turn
writes one row and the small rest of the state (:mod:`stm_stores.turn_rows`), not the
whole conversation again.
"""

from __future__ import annotations

import asyncio
import math
import os
import secrets
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

from reference_impl.store import (
    CorruptStateError,
    InvalidStateError,
    StaleStateError,
    StateStoreError,
)

from ._worker import WorkerThread
from .codec import check_expected_revision, check_key, decode_state, encode_state
from .turn_rows import Rows, Split, join_rows, split_state

__all__ = ["SQLiteStateStore"]

_T = TypeVar("_T")

# ``state`` is the whole state, or, when ``layout`` is set, the state without its lists of
# turns; ``layout`` then lists each list's turn seqs, whose JSON is in ``memory_turn``.
# ``stamp`` is new on every write: a store whose last write or read of a key carried the
# stamp still found there knows the key's rows without reading them.
_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS memory_state (
    key TEXT PRIMARY KEY,
    revision INTEGER NOT NULL,
    state TEXT NOT NULL,
    updated_at REAL NOT NULL,
    layout TEXT,
    stamp INTEGER
)
""",
    """
CREATE TABLE IF NOT EXISTS memory_turn (
    key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    turn TEXT NOT NULL,
    PRIMARY KEY (key, seq)
) WITHOUT ROWID
""",
)
#: Columns added to ``memory_state`` since its first version (files written before).
_ADDED_COLUMNS = (("layout", "TEXT"), ("stamp", "INTEGER"))

_UPSERT = """
INSERT INTO memory_state (key, revision, state, updated_at, layout, stamp)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET
    revision = excluded.revision, state = excluded.state, updated_at = excluded.updated_at,
    layout = excluded.layout, stamp = excluded.stamp
"""

_SELECT = "SELECT revision, state, layout, stamp FROM memory_state WHERE key = ?"
_SELECT_TURNS = "SELECT seq, turn FROM memory_turn WHERE key = ?"
_PUT_TURN = "INSERT OR REPLACE INTO memory_turn (key, seq, turn) VALUES (?, ?, ?)"
_DELETE_TURN = "DELETE FROM memory_turn WHERE key = ? AND seq = ?"
_DELETE_TURNS = "DELETE FROM memory_turn WHERE key = ?"


class SQLiteStateStore:
    """Keeps state as JSON text in one SQLite table.

    Implements :class:`reference_impl.store.ConditionalStateStore`. Any number of
    stores, in any number of processes, may open the same file: conditional saves
    compare and write inside one ``BEGIN IMMEDIATE`` transaction, so they stay
    atomic across processes. File databases use WAL mode so readers do not block
    the writer. ``":memory:"`` gives a private database per store. A relative path is
    taken from the working directory at construction. A file deleted or replaced while
    the store has it open fails the next operation with :class:`StateStoreError`
    (``file:`` URIs, which SQLite may be built to accept as paths, are not watched).

    A state shaped like ``memory.to_dict()`` (lists ``turns``, ``pending``, ``backlog``
    of objects with distinct integer ``seq``) is kept one row per turn: a save writes the
    turns that are new or changed since this store's last write or read of the key, and
    deletes those that left, so a turn's persist costs the size of the change. Any other
    state is kept whole. Every process that opens a file must run this version of the
    store: an older one writes states whole and leaves the turn rows in place.

    Blocking calls run one at a time in a thread of the store's own (started on first
    use, ended after 10 s idle), over one connection opened on first use. ``timeout_s``
    bounds how long an operation, the first open included, waits for another process's
    write lock. Close the store with :meth:`close`, :meth:`aclose` or ``async with``.

    ``durability="full"`` (the default, as ``sqlite3`` and the OpenAI Agents SDK's
    ``SQLiteSession`` use it) syncs the file on every commit: a save that returned survives
    a power loss. ``"normal"`` (``PRAGMA synchronous=NORMAL``) skips that sync: a save that
    returned survives the process crashing, and the file is never corrupted, but the last
    commits may be lost if the machine loses power or the OS crashes. Saves that many tasks
    make at once share a transaction, so one commit (and one sync) serves them all.

    ``cached_keys`` bounds how many keys' turn rows the store remembers to compare the next
    save with (a copy of each stored turn); a key it forgot, or that another store wrote
    since, has its rows rewritten once on its next save.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        timeout_s: float = 30.0,
        cached_keys: int = 1024,
        durability: Literal["full", "normal"] = "full",
    ) -> None:
        if (
            not isinstance(timeout_s, int | float)
            or isinstance(timeout_s, bool)
            or not 0 <= timeout_s < math.inf
        ):
            raise ValueError(f"timeout_s must be a finite number >= 0, not {timeout_s!r}")
        if type(cached_keys) is not int or cached_keys < 0:
            raise ValueError(f"cached_keys must be a non-negative int, not {cached_keys!r}")
        if durability not in ("full", "normal"):
            raise ValueError(f"durability must be 'full' or 'normal', not {durability!r}")
        self._durability = durability
        self._cached_keys = cached_keys
        self._path = os.fspath(path)
        #: A file to open, and to check for deletion, by its absolute path (a later
        #: os.chdir must not make the store open another file than the one it checks);
        #: not a private database or a URI.
        self._watched = not (self._path in ("", ":memory:") or self._path.startswith("file:"))
        self._where = os.path.abspath(self._path) if self._watched else self._path
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        #: The file the connection opened (see :meth:`_identity`).
        self._file: tuple[int, int] | None = None
        self._closed = False
        #: Per key, the rows this store last wrote or read and the stamp they carried.
        self._rows: OrderedDict[str, Rows] = OrderedDict()
        #: Writes waiting for the next transaction, and the end of the one running, if any.
        self._queue: list[_Write] = []
        self._batch_ended: asyncio.Event | None = None
        self._worker = WorkerThread(f"stm-sqlite:{os.path.basename(self._path)[:32]}")

    @property
    def path(self) -> str:
        """The database path as given (``":memory:"`` for a private database)."""
        return self._path

    async def save_memory_state(self, key: str, state: Mapping[str, Any]) -> None:
        """Store ``state`` under ``key``, replacing any existing record."""
        check_key(key)
        record = self._encode(key, state)

        def save(conn: sqlite3.Connection) -> tuple[None, Rows | None]:
            row = conn.execute(_SELECT, (key,)).fetchone()
            return None, self._write_record(conn, key, record, row)

        await self._batched(_Write(key, "save", save))

    async def save_memory_state_if(
        self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
    ) -> None:
        """Store ``state`` only if the stored revision equals ``expected_revision``.

        ``None`` means no record may exist. Raises
        :class:`~reference_impl.store.StaleStateError` otherwise, and
        :class:`~reference_impl.store.CorruptStateError` if the stored record cannot
        be decoded, turn rows included; either way the record is left unchanged. A record
        this store wrote or read last, its stamp unchanged, is not read again: rows damaged
        behind every store's back since then show at the next load.
        """
        check_key(key)
        check_expected_revision(expected_revision)
        record = self._encode(key, state)

        def save_if(conn: sqlite3.Connection) -> tuple[None, Rows | None]:
            # Inside a BEGIN IMMEDIATE transaction, which takes the write lock before
            # reading: no other process can write between the comparison and the update.
            row = conn.execute(_SELECT, (key,)).fetchone()
            actual = None
            if row is not None:
                # The record must decode, its turn rows too. One with the stamp of this
                # store's last write or read of the key decoded then.
                if not (isinstance(record, Split) and _known(record.base, row)):
                    _check_stored(conn, key, row)
                actual = row[0]
            if actual != expected_revision:
                raise StaleStateError(key, expected=expected_revision, actual=actual)
            return None, self._write_record(conn, key, record, row)

        await self._batched(_Write(key, "conditional save", save_if))

    async def load_memory_state(self, key: str) -> dict[str, Any] | None:
        """Return the state under ``key``, or ``None`` when there is none.

        Raises :class:`~reference_impl.store.CorruptStateError` if the stored
        record cannot be decoded.
        """
        check_key(key)

        def load(conn: sqlite3.Connection) -> dict[str, Any] | None:
            # One transaction: the record and its turn rows are read from one snapshot.
            conn.execute("BEGIN")
            try:
                row = conn.execute(_SELECT, (key,)).fetchone()
                if row is None:
                    self._rows.pop(key, None)
                    return None
                revision, text, layout, stamp = row
                if layout is None:
                    self._rows.pop(key, None)
                    return decode_state(key, text, revision)
                turns = conn.execute(_SELECT_TURNS, (key,)).fetchall()
            finally:
                conn.execute("COMMIT")
            try:
                state, rows = join_rows(key, decode_state(key, text, revision), layout, turns)
            except CorruptStateError:
                self._rows.pop(key, None)  # the next save rewrites every row
                raise
            self._remember(key, Rows(stamp, rows))
            return state

        return await self._run(key, "load", load)

    async def delete_memory_state(self, key: str) -> bool:
        """Remove the record under ``key``; return whether there was one."""
        check_key(key)

        def delete(conn: sqlite3.Connection) -> tuple[bool, None]:
            conn.execute(_DELETE_TURNS, (key,))
            found = conn.execute("DELETE FROM memory_state WHERE key = ?", (key,)).rowcount
            return found > 0, None

        found: bool = await self._batched(_Write(key, "delete", delete))
        return found

    async def keys(self) -> list[str]:
        """Return every stored key, sorted by code point."""

        def list_keys(conn: sqlite3.Connection) -> list[str]:
            return [row[0] for row in conn.execute("SELECT key FROM memory_state")]

        return sorted(await self._run(None, "list keys", list_keys))

    def close(self) -> None:
        """Close the connection; later operations raise ``StateStoreError``.

        Waits for an operation in progress. Idempotent.
        """
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        self._worker.stop()  # a closed store keeps no idle thread

    async def aclose(self) -> None:
        """Like :meth:`close`, without blocking the event loop."""
        await self._worker.run(self.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _encode(self, key: str, state: Mapping[str, Any]) -> Split | tuple[int, str]:
        """Check and encode ``state`` before anything is written (``InvalidStateError``):
        split into rows, re-encoding only the turns that differ from the rows this store
        last wrote or read; or whole."""
        split = split_state(key, state, self._rows.get(key))
        return encode_state(key, state) if split is None else split

    def _write_record(
        self,
        conn: sqlite3.Connection,
        key: str,
        record: Split | tuple[int, str],
        row: tuple[Any, ...] | None,
    ) -> Rows | None:
        """Write ``record`` inside the caller's transaction, where ``row`` is the key's
        stored record; return the rows to remember once the transaction commits."""
        stamp = secrets.randbits(62)
        now = time.time()
        if isinstance(record, tuple):
            revision, text = record
            if row is not None and row[2] is not None:
                conn.execute(_DELETE_TURNS, (key,))
            conn.execute(_UPSERT, (key, revision, text, now, None, stamp))
            return None
        base = record.base
        if base is not None and _known(base, row):
            # The stored rows are the ones this store last wrote or read: write the change.
            gone = base.turns.keys() - record.turns.keys()
            conn.executemany(_DELETE_TURN, ((key, seq) for seq in gone))
            turns = record.turns
            conn.executemany(_PUT_TURN, ((key, seq, turns[seq][1]) for seq in record.changed))
        else:
            if row is not None and row[2] is not None:
                conn.execute(_DELETE_TURNS, (key,))
            conn.executemany(_PUT_TURN, ((key, seq, turn[1]) for seq, turn in record.turns.items()))
        conn.execute(_UPSERT, (key, record.revision, record.head, now, record.layout, stamp))
        return Rows(stamp, record.turns)

    def _remember(self, key: str, rows: Rows | None) -> None:
        if rows is None:
            self._rows.pop(key, None)
            return
        self._rows[key] = rows
        self._rows.move_to_end(key)
        while len(self._rows) > self._cached_keys:
            self._rows.popitem(last=False)

    async def _batched(self, write: _Write) -> Any:
        """Run ``write`` in the next transaction: writes queued by many tasks meanwhile
        share one transaction, and so one commit (one ``fsync`` at ``durability="full"``).

        The first waiting task leads: it takes every queued write to the worker thread and
        wakes the others when the transaction has ended. A write cancelled before it was
        taken is dropped; one already taken completes, as any write a caller stopped
        waiting for.
        """
        self._check_open(write.key, write.action)
        self._queue.append(write)
        while not write.done:
            if self._batch_ended is not None:  # another task leads
                ended = self._batch_ended
                try:
                    await ended.wait()
                except BaseException:
                    if write in self._queue:  # not taken yet: never written
                        self._queue.remove(write)
                    raise
                continue
            if self._closed:  # closed while this write waited: no transaction, no thread
                batch, self._queue = self._queue, []
                for queued in batch:
                    queued.fail(
                        StateStoreError(f"cannot {queued.action}: store is closed", key=queued.key)
                    )
                continue
            self._batch_ended = asyncio.Event()
            batch, self._queue = self._queue, []
            try:
                await self._worker.run(partial(self._commit, batch))
            finally:
                ended, self._batch_ended = self._batch_ended, None
                ended.set()
                for taken in batch:
                    if not taken.done:  # the thread was interrupted
                        taken.fail(StateStoreError(f"cannot {taken.action}", key=taken.key))
        if write.error is not None:
            raise write.error
        return write.result

    def _commit(self, batch: list[_Write]) -> None:
        """Run ``batch`` in one transaction, each write under a savepoint of its own so one
        refused write (stale, invalid) leaves the others in; runs in the worker thread."""
        landed: list[tuple[_Write, Any, Rows | None]] = []
        try:
            with self._connection(None, "save") as conn:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for write in batch:
                        conn.execute("SAVEPOINT write")
                        try:
                            result, rows = write.operation(conn)
                        except Exception as exc:
                            if not conn.in_transaction:
                                # SQLite ended the whole transaction (a full disk): every
                                # write of the batch fails, with this cause.
                                raise
                            conn.execute("ROLLBACK TO write")
                            conn.execute("RELEASE write")
                            write.fail(self._wrap(exc, write))
                        else:
                            conn.execute("RELEASE write")
                            landed.append((write, result, rows))
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.rollback()
                    raise
        except Exception as exc:
            for write in batch:
                if not write.done:
                    self._rows.pop(write.key, None)
                    write.fail(self._wrap(exc, write))
            return
        for write, result, rows in landed:
            self._remember(write.key, rows)
            write.result, write.done = result, True

    def _wrap(self, exc: Exception, write: _Write) -> Exception:
        """The error ``write``'s caller gets: store errors name its key and action."""
        if isinstance(exc, sqlite3.Error):
            error = StateStoreError(
                f"cannot {write.action} in SQLite database {self._path!r}: {exc}", key=write.key
            )
        elif isinstance(exc, OverflowError):  # an int beyond SQLite's 64 bits
            error = InvalidStateError(f"cannot {write.action}: {exc}", key=write.key)
        elif isinstance(exc, StateStoreError) and exc.key != write.key:
            # The whole transaction failed (a lock timeout, a vanished file).
            error = StateStoreError(
                exc.detail.replace("cannot save", f"cannot {write.action}", 1), key=write.key
            )
        else:
            return exc
        # The driver's error when there is one, as for every other operation.
        error.__cause__ = exc.__cause__ if isinstance(exc.__cause__, sqlite3.Error) else exc
        return error

    async def _run(
        self, key: str | None, action: str, operation: Callable[[sqlite3.Connection], _T]
    ) -> _T:
        def call() -> _T:
            with self._connection(key, action) as conn:
                return operation(conn)

        self._check_open(key, action)
        return await self._worker.run(call)

    def _check_open(self, key: str | None, action: str) -> None:
        """Raise if the store is closed: before a call goes to the thread (a closed store
        starts none), and again under the lock there (closed meanwhile)."""
        if self._closed:
            raise StateStoreError(f"cannot {action}: store is closed", key=key)

    @contextmanager
    def _connection(self, key: str | None, action: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._check_open(key, action)
            try:
                if self._conn is None:
                    self._conn = self._connect()
                    self._file = self._identity()
                elif self._identity() != self._file:
                    raise StateStoreError(
                        f"cannot {action}: SQLite database {self._path!r} was deleted or "
                        "replaced while open (writes would go to a file nobody can read)",
                        key=key,
                    )
                yield self._conn
            except sqlite3.Error as exc:
                raise StateStoreError(
                    f"cannot {action} in SQLite database {self._path!r}: {exc}", key=key
                ) from exc

    def _identity(self) -> tuple[int, int] | None:
        """The database file's device and inode; ``None`` for ``":memory:"``.

        An open connection keeps writing to a file that was deleted or replaced, and every
        write is lost when it closes: each operation compares this with the opened file's.
        """
        if not self._watched:
            return None
        try:
            status = os.stat(self._where)
        except OSError:
            return (-1, -1)
        return (status.st_dev, status.st_ino)

    def _connect(self) -> sqlite3.Connection:
        # Switching a new file to WAL takes an exclusive lock and, when several
        # processes open the same fresh file at once, fails with "database is
        # locked" without waiting for the busy timeout. Setting up is idempotent,
        # so retry it until timeout_s has passed.
        deadline = time.monotonic() + self._timeout_s
        delay = 0.001
        while True:
            try:
                return self._open()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _open(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; save_if manages its own.
        conn = sqlite3.connect(
            self._where,
            timeout=self._timeout_s,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            # A no-op for ":memory:"; file systems without WAL keep the rollback
            # journal, where BEGIN IMMEDIATE is just as atomic.
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._durability.upper()}")
            for statement in _SCHEMA:
                conn.execute(statement)
            _add_columns(conn)
        except BaseException:
            conn.close()
            raise
        return conn


def _check_stored(conn: sqlite3.Connection, key: str, row: tuple[Any, ...]) -> None:
    """Raise ``CorruptStateError`` unless the stored record ``row`` of ``key`` decodes, with
    its turn rows: a conditional save never replaces a record a load reports corrupt."""
    head = decode_state(key, row[1], row[0])
    if row[2] is not None:
        join_rows(key, head, row[2], conn.execute(_SELECT_TURNS, (key,)).fetchall())


def _known(base: Rows | None, row: tuple[Any, ...] | None) -> bool:
    """Whether the stored record ``row`` holds the turn rows ``base``: the ones this store
    last wrote or read, with the stamp still found there."""
    return base is not None and row is not None and row[2] is not None and row[3] == base.stamp


@dataclass(eq=False, slots=True)
class _Write:
    """A write waiting for, or in, a batched transaction. ``operation`` runs in the
    transaction and returns the caller's result and the rows to remember after commit."""

    key: str
    action: str
    operation: Callable[[sqlite3.Connection], tuple[Any, Rows | None]]
    done: bool = False
    result: Any = None
    error: Exception | None = None

    def fail(self, error: Exception) -> None:
        self.error, self.done = error, True


def _add_columns(conn: sqlite3.Connection) -> None:
    """Bring a file written by an older version of this store up to the current table."""

    def missing() -> list[tuple[str, str]]:
        have = {row[1] for row in conn.execute("PRAGMA table_info(memory_state)")}
        return [(name, kind) for name, kind in _ADDED_COLUMNS if name not in have]

    if not missing():
        return
    conn.execute("BEGIN IMMEDIATE")  # another process may be adding them too
    try:
        for name, kind in missing():
            conn.execute(f"ALTER TABLE memory_state ADD COLUMN {name} {kind}")
        conn.execute("COMMIT")
    except BaseException:
        conn.rollback()
        raise


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    # The extended code (e.g. SQLITE_BUSY_RECOVERY) keeps the primary code in its low byte.
    return exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
