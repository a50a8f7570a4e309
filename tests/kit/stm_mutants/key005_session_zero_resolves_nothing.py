"""KEY-005 broken: an integer session id 0 resolves nothing.

The resolver guards on the raw value before converting it (``if not raw_session: return
None``, the usual "no session, no memory" check), so ``{"session_id": 0}`` -- an integer,
which KEY-005 says resolves as its decimal digits, ``"0"`` -- disables memory for the
call (or, without ``require_explicit_key``, gets an ephemeral key). Tenant and user ids,
``0`` included, resolve as in the reference; so do sessions of every other value.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl.keys import extract_path, resolve_memory_key
from reference_impl.types import MemoryIsolation, MemoryKey

from . import reference_provider

BREAKS = "KEY-005"
COLLATERAL: dict[str, str] = {}


def _resolve(
    isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any
) -> MemoryKey | None:
    # MUTATION: a falsy raw session id (0 included) is taken for "no session".
    if (
        explicit is None
        and tool_context is not None
        and not extract_path(tool_context, isolation.session_key)
    ):
        return None
    return resolve_memory_key(isolation, memory_key=explicit, tool_context=tool_context)


provider = dataclasses.replace(
    reference_provider, name="mutant-key005-session-zero-resolves-nothing", resolve_key=_resolve
)
