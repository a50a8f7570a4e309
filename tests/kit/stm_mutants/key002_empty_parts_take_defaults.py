"""KEY-002 broken: empty key parts are stored under the default tenant and user.

The storage key is built with the resolver's defaults applied once more:
``tenant_id or "default"``, ``user_id or "anonymous"``. ``MemoryKey("", "", "s")`` and
``MemoryKey("default", "anonymous", "s")`` are distinct keys, but they get one storage key
and share a record. Keys with non-empty parts are stored as by the reference.
"""

from __future__ import annotations

import dataclasses

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryKey

from . import mutant_provider

BREAKS = "KEY-002"
COLLATERAL: dict[str, str] = {}


def _storage_key(key: MemoryKey) -> str:
    # MUTATION: an empty part is replaced by the default it would have resolved to
    filled = MemoryKey(key.tenant_id or "default", key.user_id or "anonymous", key.session_id)
    return filled.composite()


provider = dataclasses.replace(
    mutant_provider("key002-empty-parts-take-defaults", DefaultShortTermMemory),
    storage_key=_storage_key,
)
