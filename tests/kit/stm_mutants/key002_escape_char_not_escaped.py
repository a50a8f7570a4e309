"""KEY-002 broken: the storage key escapes ``:`` inside a part but not ``%`` itself.

``MemoryKey("t", "u", "s%3A")`` and ``MemoryKey("t", "u", "s:")`` both get the storage key
``t:u:s%3A``, so the two keys share one record in a store. Keys without ``%`` in a part
are stored exactly as by the reference.
"""

from __future__ import annotations

import dataclasses

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryKey

from . import mutant_provider

BREAKS = "KEY-002"
COLLATERAL: dict[str, str] = {}


def _storage_key(key: MemoryKey) -> str:
    parts = (key.tenant_id, key.user_id, key.session_id)
    # MUTATION: "%" is not escaped first, so an escaped ":" can be forged
    return ":".join(part.replace(":", "%3A") for part in parts)


provider = dataclasses.replace(
    mutant_provider("key002-escape-char-not-escaped", DefaultShortTermMemory),
    storage_key=_storage_key,
)
