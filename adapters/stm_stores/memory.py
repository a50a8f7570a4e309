"""A process-local state store, for tests and single-process agents."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from reference_impl.store import StaleStateError

from .codec import check_expected_revision, check_key, decode_state, encode_state

__all__ = ["InMemoryStateStore"]


class InMemoryStateStore:
    """Keeps state as JSON text in a dict, so callers never alias stored state.

    Implements :class:`reference_impl.store.ConditionalStateStore`. Safe for
    concurrent tasks on one event loop (any anyio backend); not shared between
    threads or processes.
    """

    def __init__(self) -> None:
        self._records: dict[str, tuple[int, str]] = {}
        # The critical sections have no await today; the lock keeps conditional
        # saves atomic should that change.
        self._lock = anyio.Lock()

    async def save_memory_state(self, key: str, state: Mapping[str, Any]) -> None:
        """Store a copy of ``state`` under ``key``, replacing any existing record."""
        check_key(key)
        record = encode_state(key, state)
        async with self._lock:
            self._records[key] = record

    async def save_memory_state_if(
        self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
    ) -> None:
        """Store ``state`` only if the stored revision equals ``expected_revision``.

        ``None`` means no record may exist. Raises
        :class:`~reference_impl.store.StaleStateError` otherwise.
        """
        check_key(key)
        check_expected_revision(expected_revision)
        record = encode_state(key, state)
        async with self._lock:
            current = self._records.get(key)
            actual = None if current is None else current[0]
            if actual != expected_revision:
                raise StaleStateError(key, expected=expected_revision, actual=actual)
            self._records[key] = record

    async def load_memory_state(self, key: str) -> dict[str, Any] | None:
        """Return a fresh copy of the state under ``key``, or ``None``."""
        check_key(key)
        async with self._lock:
            record = self._records.get(key)
        if record is None:
            return None
        revision, text = record
        return decode_state(key, text, revision)

    async def delete_memory_state(self, key: str) -> bool:
        """Remove the record under ``key``; return whether there was one."""
        check_key(key)
        async with self._lock:
            return self._records.pop(key, None) is not None

    async def keys(self) -> list[str]:
        """Return every stored key, sorted by code point."""
        async with self._lock:
            return sorted(self._records)
