"""KEY-004 broken: dotted paths are followed through mappings only, not attributes.

A ``tool_context`` (or a part of it) that is an object, such as a request context or a
dataclass, resolves nothing: ``MemoryIsolation(session_key="conv.id")`` finds the session
in ``{"conv": {"id": ...}}`` but not in ``{"conv": Conversation(id=...)}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from reference_impl.keys import _UNUSABLE, _part
from reference_impl.types import MemoryIsolation, MemoryKey

from . import reference_provider

BREAKS = "KEY-004"
COLLATERAL: dict[str, str] = {}


def _extract(source: Any, path: str) -> Any:
    current = source
    for part in path.split("."):
        # MUTATION: only mappings are followed; an object's attributes are never read
        current = current.get(part) if isinstance(current, Mapping) else None
        if current is None:
            return None
    return current


def _resolve_key(
    isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any
) -> MemoryKey | None:
    if explicit is not None:
        return explicit
    session = _part(_extract(tool_context, isolation.session_key))
    tenant = _part(_extract(tool_context, isolation.tenant_key))
    user = _part(_extract(tool_context, isolation.user_key))
    if session is None or _UNUSABLE in (session, tenant, user):
        return None
    return MemoryKey(tenant_id=tenant or "default", user_id=user or "anonymous", session_id=session)


provider = dataclasses.replace(
    reference_provider, name="mutant-key004-attribute-paths-ignored", resolve_key=_resolve_key
)
