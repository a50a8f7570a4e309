"""KEY-003 broken: the resolver returns None when tool_context is None, before looking at
the explicit memory_key, so an explicit key is ignored for calls without tool_context."""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl.keys import resolve_memory_key
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryIsolation, MemoryKey

from . import mutant_provider

BREAKS = "KEY-003"
COLLATERAL: dict[str, str] = {}


def _resolve(isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any):
    if tool_context is None:  # MUTATION: early return before the explicit key is consulted
        return None
    return resolve_memory_key(isolation, memory_key=explicit, tool_context=tool_context)


provider = dataclasses.replace(
    mutant_provider("key003-no-context-checked-first", DefaultShortTermMemory),
    resolve_key=_resolve,
)
