"""KEY-002 broken: the storage key escapes ':' inside a part as '\\:' but does not escape
the backslash itself. ("t", "u\\", "x:s") and ("t", "u:x\\", "s") both give 't:u\\:x\\:s'."""

from __future__ import annotations

import dataclasses

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryKey

from . import mutant_provider

BREAKS = "KEY-002"
COLLATERAL: dict[str, str] = {}


def _storage_key(key: MemoryKey) -> str:
    parts = (key.tenant_id, key.user_id, key.session_id)
    # MUTATION: backslash-escape of ':' without escaping '\\' itself
    return ":".join(part.replace(":", "\\:") for part in parts)


provider = dataclasses.replace(
    mutant_provider("key002-backslash-escape", DefaultShortTermMemory),
    storage_key=_storage_key,
)
