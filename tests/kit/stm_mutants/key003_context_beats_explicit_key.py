"""KEY-003 broken: a session found in ``tool_context`` wins over an explicit ``memory_key``.

Only the provider's key resolver differs from the reference: it resolves from
``tool_context`` first and falls back to the explicit key.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl.keys import resolve_memory_key
from reference_impl.types import MemoryIsolation, MemoryKey

from . import reference_provider

BREAKS = "KEY-003"
COLLATERAL: dict[str, str] = {}


def _resolve_key(
    isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any
) -> MemoryKey | None:
    # MUTATION: tool_context first, the explicit key only as a fallback
    found = resolve_memory_key(isolation, tool_context=tool_context)
    return found or resolve_memory_key(isolation, memory_key=explicit)


provider = dataclasses.replace(
    reference_provider, name="mutant-key003-context-beats-explicit-key", resolve_key=_resolve_key
)
