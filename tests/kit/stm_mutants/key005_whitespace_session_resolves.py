"""KEY-005 broken: a whitespace-only session id counts as a session.

Key parts are not stripped before the emptiness test, so ``session_id="   "`` resolves a
key, ``("default", "anonymous", "   ")`` with no tenant or user given, shared by every
caller that sends a blank session.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl.keys import _UNUSABLE, extract_path
from reference_impl.types import MemoryIsolation, MemoryKey

from . import reference_provider

BREAKS = "KEY-005"
COLLATERAL: dict[str, str] = {}


def _part(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        return _UNUSABLE
    return str(value) or None  # MUTATION: not stripped, so "   " is a part


def _resolve_key(
    isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any
) -> MemoryKey | None:
    if explicit is not None:
        return explicit
    if tool_context is None:
        return None
    session = _part(extract_path(tool_context, isolation.session_key))
    tenant = _part(extract_path(tool_context, isolation.tenant_key))
    user = _part(extract_path(tool_context, isolation.user_key))
    if session is None or _UNUSABLE in (session, tenant, user):
        return None
    return MemoryKey(tenant_id=tenant or "default", user_id=user or "anonymous", session_id=session)


provider = dataclasses.replace(
    reference_provider, name="mutant-key005-whitespace-session-resolves", resolve_key=_resolve_key
)
