"""KEY-006 broken: with ``require_explicit_key=True``, a ``tool_context`` that names a
tenant and a user but no session resolves an ephemeral session of that tenant and user.

The fail-closed guard was written as "the caller must be identified": a context with
``tenant_id`` and ``user_id`` but no (or a blank) ``session_id`` gets a fresh
``ephemeral-<uuid>`` session under them, so memory is on for the call (its turn is added,
and persisted). Contexts missing the tenant or the user, and every context with a
session, resolve as in the reference. Spec, KEY-006: "With ``require_explicit_key=True``
and nothing resolvable, memory MUST be disabled for that call: nothing injected, added or
persisted" (KEY-005: "a missing, empty or whitespace-only session id resolves nothing").
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from reference_impl import keys
from reference_impl.types import MemoryIsolation, MemoryKey

from . import reference_provider

BREAKS = "KEY-006"
COLLATERAL: dict[str, str] = {}


def resolve(
    isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any
) -> MemoryKey | None:
    key = keys.resolve_memory_key(isolation, memory_key=explicit, tool_context=tool_context)
    if key is None and explicit is None and isolation.require_explicit_key:
        tenant = keys._part(keys.extract_path(tool_context, isolation.tenant_key))
        user = keys._part(keys.extract_path(tool_context, isolation.user_key))
        session = keys._part(keys.extract_path(tool_context, isolation.session_key))
        usable = all(isinstance(p, str) for p in (tenant, user))
        if tool_context is not None and usable and session is None:
            # MUTATION: an identified caller is not failed closed: ephemeral session
            return MemoryKey(tenant, user, f"ephemeral-{uuid.uuid4()}")
    return key


provider = dataclasses.replace(
    reference_provider,
    name="mutant-key006-identified-caller-gets-ephemeral-session",
    resolve_key=resolve,
)
