"""The contract between a memory and the store it persists through.

A store maps arbitrary string keys to JSON-serialisable state dicts, as produced by
``memory.to_dict()``. Keys are opaque: a store must keep every distinct string
apart (no normalisation, truncation or case folding).

A state carries an integer ``"revision"`` (absent means 0) that the memory raises by
one on each successful persist. Stores that implement :class:`ConditionalStateStore`
use it for optimistic concurrency: a write names the revision it expects to replace
and is refused with :class:`StaleStateError` when another writer got there first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ConditionalStateStore",
    "CorruptStateError",
    "InvalidStateError",
    "StaleStateError",
    "StateStore",
    "StateStoreError",
    "describe_key",
    "revision_of",
    "supports_conditional_save",
]

#: Keys longer than this are shortened in error messages (the ``key`` attribute
#: always holds the full key).
_MAX_KEY_REPR = 200


def describe_key(key: str) -> str:
    """Return ``repr(key)``, shortened for very long keys so messages stay readable."""
    if len(key) <= _MAX_KEY_REPR:
        return repr(key)
    return f"{key[: _MAX_KEY_REPR // 2]!r}... ({len(key)} chars)"


def revision_of(state: Mapping[str, Any]) -> Any:
    """Return the revision recorded in ``state`` (0 when the field is absent).

    The value is returned unchecked; stores decide how to treat a non-integer.
    """
    return state.get("revision", 0)


class StateStoreError(Exception):
    """A store operation failed.

    ``key`` is the key the operation was about, or ``None`` for store-wide
    operations such as listing keys; the message names it (shortened when very
    long). ``detail`` is the message without the key.
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        self.key = key
        self.detail = message
        super().__init__(message if key is None else f"{message} (key={describe_key(key)})")

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments are lost by the default Exception pickling, and
        # errors may cross process boundaries (multiprocessing, xdist).
        return (_rebuild_error, (type(self), self.__dict__.copy(), self.args))


class InvalidStateError(StateStoreError):
    """The state given to a save cannot be stored as JSON.

    Raised before anything is written; the original error, if any, is chained as
    ``__cause__``.
    """


class StaleStateError(StateStoreError):
    """A conditional save found a different revision than the caller expected.

    ``expected`` is the revision the caller named (``None``: no record may exist);
    ``actual`` is the stored revision (``None``: no record exists).
    """

    def __init__(self, key: str, *, expected: int | None, actual: int | None) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"stale state: expected {_describe_revision(expected)}, "
            f"found {_describe_revision(actual)}",
            key=key,
        )


class CorruptStateError(StateStoreError):
    """A stored record cannot be decoded into a state dict.

    The record is reported, never treated as absent nor silently replaced by a
    conditional save; an unconditional save may overwrite it deliberately.
    """


def _describe_revision(revision: int | None) -> str:
    return "no record" if revision is None else f"revision {revision}"


def _rebuild_error(
    cls: type[StateStoreError], attrs: dict[str, Any], args: tuple[Any, ...]
) -> StateStoreError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(attrs)
    return error


@runtime_checkable
class StateStore(Protocol):
    """Persists memory state under string keys."""

    async def save_memory_state(self, key: str, state: Mapping[str, Any]) -> None:
        """Store ``state`` under ``key``, replacing any existing record."""
        ...

    async def load_memory_state(self, key: str) -> dict[str, Any] | None:
        """Return the state stored under ``key``, or ``None`` when there is none."""
        ...


@runtime_checkable
class ConditionalStateStore(StateStore, Protocol):
    """A store that can refuse a write that would overwrite someone else's."""

    async def save_memory_state_if(
        self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
    ) -> None:
        """Store ``state`` only if the stored revision equals ``expected_revision``.

        ``expected_revision=None`` means no record may exist yet. The check and the
        write are atomic. Raises :class:`StaleStateError` when the stored revision
        differs, leaving the record unchanged.
        """
        ...


def supports_conditional_save(store: object) -> bool:
    """Return whether ``store`` offers :meth:`ConditionalStateStore.save_memory_state_if`."""
    return isinstance(store, ConditionalStateStore)
