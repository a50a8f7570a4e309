"""The kit's own state store: what persistence checks use unless a provider brings one.

Deliberately plain: a dict of JSON text, so a state comes back as a fresh copy and anything
that is not JSON fails loudly. It records every key it is asked about, so checks can see
which storage keys a backend used. It is not the reference's store: the kit never judges a
backend with the code of another backend.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["ConditionalKitStateStore", "KitStateStore", "KitStaleStateError"]


class KitStateStore:
    """``save_memory_state(key, state)`` / ``load_memory_state(key)`` over a dict.

    Keys are opaque strings, kept apart exactly as given (no normalisation).
    """

    def __init__(self) -> None:
        self._records: dict[str, str] = {}
        #: Every key passed to ``save_memory_state``, in call order.
        self.saved_keys: list[str] = []
        #: Every key passed to ``load_memory_state``, in call order.
        self.loaded_keys: list[str] = []

    async def save_memory_state(self, key: str, state: Mapping[str, Any]) -> None:
        """Store a copy of ``state`` under ``key``.

        Raises:
            TypeError: ``key`` is not a string or ``state`` is not JSON data.
        """
        if not isinstance(key, str):
            raise TypeError(f"storage key must be a str, got {type(key).__name__}")
        try:
            text = json.dumps(dict(state), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            # Named as SER-001's: the check that persists is about something else.
            raise TypeError(f"SER-001: state saved under {key!r} is not JSON data: {exc}") from exc
        self.saved_keys.append(key)
        self._records[key] = text

    async def load_memory_state(self, key: str) -> dict[str, Any] | None:
        """A fresh copy of the state under ``key``, or ``None``."""
        self.loaded_keys.append(key)
        text = self._records.get(key)
        return None if text is None else dict(json.loads(text))

    def keys(self) -> list[str]:
        """The stored keys, in insertion order."""
        return list(self._records)


class KitStaleStateError(RuntimeError):
    """A conditional save named another revision than the one stored."""


class ConditionalKitStateStore(KitStateStore):
    """A :class:`KitStateStore` that also offers the optional conditional save of the store
    contract (docs/backend-authors.md): ``save_memory_state_if(key, state, *,
    expected_revision)`` writes only over the revision the writer last loaded or saved.

    A backend may use either save; SER-006 holds the revisions it writes to the same rule.
    """

    async def save_memory_state_if(
        self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
    ) -> None:
        """Store ``state`` only if the stored revision (absent: 0) is ``expected_revision``;
        ``None`` expects no record. Checked and written with no await in between.

        Raises:
            KitStaleStateError: the stored revision differs; nothing is written.
            TypeError: as :meth:`KitStateStore.save_memory_state`.
        """
        text = self._records.get(key) if isinstance(key, str) else None
        stored = None if text is None else json.loads(text).get("revision", 0)
        if stored != expected_revision:
            raise KitStaleStateError(
                f"conditional save under {key!r} expected {_revision(expected_revision)}, "
                f"found {_revision(stored)}"
            )
        await self.save_memory_state(key, state)


def _revision(revision: Any) -> str:
    return "no record" if revision is None else f"revision {revision!r}"
