"""KEY-002 broken: the storage key lowercases the user id ("user ids are e-mail addresses,
and those are case-insensitive").

``("t", "Ann@x.io", "s")`` and ``("t", "ann@x.io", "s")`` share one record: the second
memory's persist overwrites the first's, which then cannot hydrate its own state. KEY-002:
the storage key "MUST be injective for arbitrary strings (... case and normalisation
twins ...)". Tenant and session keep their case.
"""

from __future__ import annotations

import dataclasses

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryKey

from . import mutant_provider

BREAKS = "KEY-002"
COLLATERAL: dict[str, str] = {}


def _storage_key(key: MemoryKey) -> str:
    # MUTATION: the user part is case-folded before it is encoded
    return MemoryKey(key.tenant_id, key.user_id.lower(), key.session_id).composite()


provider = dataclasses.replace(
    mutant_provider("key002-user-id-lowercased", DefaultShortTermMemory),
    storage_key=_storage_key,
)
