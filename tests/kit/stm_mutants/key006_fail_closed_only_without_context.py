"""KEY-006 broken: ``require_explicit_key`` fails closed only when ``tool_context`` is
empty.

The resolver mints an ephemeral key (as the reference's session does when
``require_explicit_key`` is false) for a non-empty ``tool_context`` in which none of the
three paths finds anything, whatever ``require_explicit_key`` says: the fail-closed guard
was written as ``if isolation.require_explicit_key and not tool_context``. An empty or
missing context, and any context where some part is found, resolve as in the reference.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl import keys
from reference_impl.session import ephemeral_key
from reference_impl.types import MemoryIsolation, MemoryKey

from . import reference_provider

BREAKS = "KEY-006"
COLLATERAL: dict[str, str] = {}


def resolve(isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any):
    key = keys.resolve_memory_key(isolation, memory_key=explicit, tool_context=tool_context)
    if key is None and tool_context:
        paths = (isolation.tenant_key, isolation.user_key, isolation.session_key)
        if all(keys.extract_path(tool_context, p) is None for p in paths):
            return ephemeral_key()  # MUTATION: fail closed only for an empty context
    return key


provider = dataclasses.replace(
    reference_provider,
    name="mutant-key006-fail-closed-only-without-context",
    resolve_key=resolve,
)
