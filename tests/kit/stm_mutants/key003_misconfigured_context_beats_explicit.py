"""KEY-003 broken: a ``tool_context`` in which a ``MemoryIsolation`` path reaches a value of
an unusable type (a mapping, an object, a float, a bool) disables memory even when an
explicit ``memory_key`` is given.

The resolver validates the configuration first ("a path one level short is a deployment
error: fail closed") and only then looks at the explicit key. With
``{"session_id": {"id": "s"}}`` and ``memory_key=MemoryKey("t", "u", "s")`` it returns
``None``. Every context whose parts are strings, integers or absent resolves as in the
reference, explicit key included. Spec, KEY-003: "An explicit ``memory_key=`` MUST win
over anything found in ``tool_context``."
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl import keys
from reference_impl.types import MemoryIsolation, MemoryKey

from . import reference_provider

BREAKS = "KEY-003"
COLLATERAL: dict[str, str] = {}


def resolve(
    isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any
) -> MemoryKey | None:
    if tool_context is not None:
        paths = (isolation.tenant_key, isolation.user_key, isolation.session_key)
        parts = [keys._part(keys.extract_path(tool_context, p)) for p in paths]
        if any(p is keys._UNUSABLE for p in parts):
            return None  # MUTATION: the misconfiguration check runs before the explicit key
    return keys.resolve_memory_key(isolation, memory_key=explicit, tool_context=tool_context)


provider = dataclasses.replace(
    reference_provider,
    name="mutant-key003-misconfigured-context-beats-explicit",
    resolve_key=resolve,
)
