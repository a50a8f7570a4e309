"""KEY-002 broken: an empty key part is stored as ``_``.

The storage key escapes ``%`` and ``:`` as the reference does, but writes an empty part as
``_`` (path-like stores refuse empty segments: ``t::s`` becomes ``t:_:s``), without
escaping a literal ``_`` part. ``MemoryKey("t", "", "s")`` and ``MemoryKey("t", "_", "s")``
share one record: the second memory's persist overwrites the first's. KEY-002: the storage
key "MUST be injective for arbitrary strings (... empty and long parts)".
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
    # MUTATION: "" and "_" encode alike.
    return ":".join(p.replace("%", "%25").replace(":", "%3A") or "_" for p in parts)


provider = dataclasses.replace(
    mutant_provider("key002-empty-part-placeholder", DefaultShortTermMemory),
    storage_key=_storage_key,
)
