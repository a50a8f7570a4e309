"""KEY-003 broken: an explicit key whose session id is empty or blank is ignored.

The KEY-005 rule ("a missing, empty or whitespace-only session id resolves nothing") is
applied to explicit keys too: ``memory_key=MemoryKey("t1", "u1", "")`` is dropped and the
key is resolved from ``tool_context`` instead. Only the provider's key resolver differs
from the reference; explicit keys with a non-blank session win as they should.
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
    if explicit is not None and not explicit.session_id.strip():
        explicit = None  # MUTATION: "no session" applied to an explicit key
    return resolve_memory_key(isolation, memory_key=explicit, tool_context=tool_context)


provider = dataclasses.replace(
    reference_provider,
    name="mutant-key003-blank-explicit-session-ignored",
    resolve_key=_resolve_key,
)
