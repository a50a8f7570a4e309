"""KEY-002 broken: the storage key strips surrounding whitespace from each key part.

A "tidy the ids" step (``part.strip()``) before escaping, so that an id pasted with a
trailing space reaches its record: ``MemoryKey("t", "u ", "s")`` and ``MemoryKey("t", "u",
"s")`` share the storage key ``t:u:s`` and overwrite each other in a shared store. Keys
without surrounding whitespace are stored as by the reference.
"""

from __future__ import annotations

import dataclasses

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryKey

from . import mutant_provider

BREAKS = "KEY-002"
COLLATERAL: dict[str, str] = {}


def _storage_key(key: MemoryKey) -> str:
    # MUTATION: whitespace twins get one storage key
    parts = (key.tenant_id.strip(), key.user_id.strip(), key.session_id.strip())
    return MemoryKey(*parts).composite()


provider = dataclasses.replace(
    mutant_provider("key002-storage-key-strips-whitespace", DefaultShortTermMemory),
    storage_key=_storage_key,
)
