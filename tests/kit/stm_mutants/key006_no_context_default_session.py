"""KEY-006 broken: without any ``tool_context`` the resolver falls back to a default key.

A call with no ``tool_context`` at all (a script, a test harness) gets
``MemoryKey("default", "anonymous", "default")`` even under ``require_explicit_key=True``,
so every such caller shares one memory instead of having memory disabled. A
``tool_context`` that resolves nothing still resolves nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl.keys import resolve_memory_key
from reference_impl.types import MemoryIsolation, MemoryKey

from . import reference_provider

BREAKS = "KEY-006"
COLLATERAL: dict[str, str] = {}


def _resolve_key(
    isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any
) -> MemoryKey | None:
    if explicit is None and tool_context is None:
        # MUTATION: no context at all means the default session, whatever the isolation says
        return MemoryKey("default", "anonymous", "default")
    return resolve_memory_key(isolation, memory_key=explicit, tool_context=tool_context)


provider = dataclasses.replace(
    reference_provider, name="mutant-key006-no-context-default-session", resolve_key=_resolve_key
)
