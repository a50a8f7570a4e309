"""KEY-001 broken: the tenant is not part of a memory's scope.

Live memories are registered in a class-level table keyed by ``(user_id, session_id)``.
A new memory whose key differs from a live one only in ``tenant_id`` adopts that memory's
state object, so one tenant's turns, summary and token count show through another
tenant's key. Memories with identical keys, or differing in user or session, stay apart.
"""

from __future__ import annotations

import weakref
from typing import Any, ClassVar

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "KEY-001"
COLLATERAL = {
    "KEY-002": (
        "keys that differ only in their tenant share one state, so distinct keys are not kept apart"
    ),
    "KEY-007": (
        "a memory that ignores the tenant of its key takes another tenant's state, recorded "
        "under the same user and session, for its own"
    ),
}


class TenantBlindMemory(DefaultShortTermMemory):
    _live: ClassVar[weakref.WeakValueDictionary[tuple[str, str], DefaultShortTermMemory]] = (
        weakref.WeakValueDictionary()
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        key = self.key
        if key is None:
            return
        scope = (key.user_id, key.session_id)  # MUTATION: tenant_id left out of the scope
        other = self._live.get(scope)
        if other is not None and not other._closed and other.key != key:
            self._state = other._state
        else:
            self._live[scope] = self


provider = mutant_provider("key001-tenant-blind-scope", TenantBlindMemory)
