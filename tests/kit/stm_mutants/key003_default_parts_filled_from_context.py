"""KEY-003 broken: an explicit key's placeholder parts -- tenant ``"default"``, user
``"anonymous"`` -- are filled in from ``tool_context`` when it resolves a key ("the
caller did not know them"); the explicit session id is kept.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl import keys
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryIsolation, MemoryKey

from . import mutant_provider

BREAKS = "KEY-003"
COLLATERAL: dict[str, str] = {}


def _resolve(isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any):
    resolved = keys.resolve_memory_key(isolation, memory_key=explicit, tool_context=tool_context)
    if explicit is None or tool_context is None:
        return resolved
    found = keys.resolve_memory_key(isolation, tool_context=tool_context)
    if found is None:
        return resolved
    # MUTATION: placeholders of the explicit key taken from tool_context
    return MemoryKey(
        found.tenant_id if explicit.tenant_id == "default" else explicit.tenant_id,
        found.user_id if explicit.user_id == "anonymous" else explicit.user_id,
        explicit.session_id,
    )


provider = dataclasses.replace(
    mutant_provider("key003-default-parts-filled-from-context", DefaultShortTermMemory),
    resolve_key=_resolve,
)
