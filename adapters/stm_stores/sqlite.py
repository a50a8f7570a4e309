"""An embedded SQLite state store, safe to share between processes."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio.to_thread

from reference_impl.store import StaleStateError, StateStoreError

from .codec import check_expected_revision, check_key, decode_state, encode_state

__all__ = ["SQLiteStateStore"]

_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_state (
    key TEXT PRIMARY KEY,
    revision INTEGER NOT NULL,
    state TEXT NOT NULL,
    updated_at REAL NOT NULL
)
"""

_UPSERT = """
INSERT INTO memory_state (key, revision, state, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET
    revision = excluded.revision, state = excluded.state, updated_at = excluded.updated_at
"""

_SELECT = "SELECT revision, state FROM memory_state WHERE key = ?"


class SQLiteStateStore:
    """Keeps state as JSON text in one SQLite table.

    Implements :class:`reference_impl.store.ConditionalStateStore`. Any number of
    stores, in any number of processes, may open the same file: conditional saves
    compare and write inside one ``BEGIN IMMEDIATE`` transaction, so they stay
    atomic across processes. File databases use WAL mode so readers do not block
    the writer. ``":memory:"`` gives a private database per store.

    Blocking calls run in a worker thread over one connection, opened on first use
    and serialised by a lock. ``timeout_s`` bounds how long an operation, the first
    open included, waits for another process's write lock. Close the store with :meth:`close`,
    :meth:`aclose` or ``async with``.
    """

    def __init__(
        self, path: str | os.PathLike[str] = ":memory:", *, timeout_s: float = 30.0
    ) -> None:
        self._path = os.fspath(path)
        self._where = os.path.abspath(self._path)  # where connect() opens it, from here
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        #: The file the connection opened (see :meth:`_identity`).
        self._file: tuple[int, int] | None = None
        self._closed = False

    @property
    def path(self) -> str:
        """The database path as given (``":memory:"`` for a private database)."""
        return self._path

    async def save_memory_state(self, key: str, state: Mapping[str, Any]) -> None:
        """Store ``state`` under ``key``, replacing any existing record."""
        check_key(key)
        revision, text = encode_state(key, state)

        def save(conn: sqlite3.Connection) -> None:
            conn.execute(_UPSERT, (key, revision, text, time.time()))

        await self._run(key, "save", save)

    async def save_memory_state_if(
        self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
    ) -> None:
        """Store ``state`` only if the stored revision equals ``expected_revision``.

        ``None`` means no record may exist. Raises
        :class:`~reference_impl.store.StaleStateError` otherwise, and
        :class:`~reference_impl.store.CorruptStateError` if the stored record cannot
        be decoded; either way the record is left unchanged.
        """
        check_key(key)
        check_expected_revision(expected_revision)
        revision, text = encode_state(key, state)

        def save_if(conn: sqlite3.Connection) -> None:
            # IMMEDIATE takes the write lock before reading, so no other process
            # can write between the comparison and the update.
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(_SELECT, (key,)).fetchone()
                actual = None
                if row is not None:
                    decode_state(key, row[1], row[0])
                    actual = row[0]
                if actual != expected_revision:
                    raise StaleStateError(key, expected=expected_revision, actual=actual)
                conn.execute(_UPSERT, (key, revision, text, time.time()))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise

        await self._run(key, "conditional save", save_if)

    async def load_memory_state(self, key: str) -> dict[str, Any] | None:
        """Return the state under ``key``, or ``None`` when there is none.

        Raises :class:`~reference_impl.store.CorruptStateError` if the stored
        record cannot be decoded.
        """
        check_key(key)

        def load(conn: sqlite3.Connection) -> dict[str, Any] | None:
            row = conn.execute(_SELECT, (key,)).fetchone()
            return None if row is None else decode_state(key, row[1], row[0])

        return await self._run(key, "load", load)

    async def delete_memory_state(self, key: str) -> bool:
        """Remove the record under ``key``; return whether there was one."""
        check_key(key)

        def delete(conn: sqlite3.Connection) -> bool:
            return conn.execute("DELETE FROM memory_state WHERE key = ?", (key,)).rowcount > 0

        return await self._run(key, "delete", delete)

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

    async def aclose(self) -> None:
        """Like :meth:`close`, without blocking the event loop."""
        await anyio.to_thread.run_sync(self.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run(
        self, key: str | None, action: str, operation: Callable[[sqlite3.Connection], _T]
    ) -> _T:
        def call() -> _T:
            with self._connection(key, action) as conn:
                return operation(conn)

        return await anyio.to_thread.run_sync(call)

    @contextmanager
    def _connection(self, key: str | None, action: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise StateStoreError(f"cannot {action}: store is closed", key=key)
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
        if self._path in ("", ":memory:") or self._path.startswith("file:"):
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
            self._path,
            timeout=self._timeout_s,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            # A no-op for ":memory:"; file systems without WAL keep the rollback
            # journal, where BEGIN IMMEDIATE is just as atomic.
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    # The extended code (e.g. SQLITE_BUSY_RECOVERY) keeps the primary code in its low byte.
    return exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
