"""KEY-002 broken: the storage key joins the parts with the ASCII unit separator
(U+001F, "never in an id") and escapes nothing: ("t\\x1fu", "v", "s") and
("t", "u\\x1fv", "s") share a record.
"""

from __future__ import annotations

import dataclasses

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryKey

from . import mutant_provider

BREAKS = "KEY-002"
COLLATERAL: dict[str, str] = {}


def _storage_key(key: MemoryKey) -> str:
    return "\x1f".join((key.tenant_id, key.user_id, key.session_id))  # MUTATION


provider = dataclasses.replace(
    mutant_provider("key002-unit-separator-join", DefaultShortTermMemory),
    storage_key=_storage_key,
)
