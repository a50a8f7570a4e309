"""KEY-005 broken: a key part of another type than a string or an integer takes its default.

A ``tenant_key`` path that stops one level short (``tenant`` where the tenant is
``tenant.id``) reaches a mapping. The mutant treats it as missing, so every tenant that
sends one resolves the tenant ``"default"``, and two tenants' sessions of the same id
share a memory. The reference resolves no key at all for it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl.keys import extract_path
from reference_impl.types import MemoryIsolation, MemoryKey

from . import reference_provider

BREAKS = "KEY-005"
COLLATERAL: dict[str, str] = {}


def _part(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None  # MUTATION: a mapping, object, float or bool counts as missing
    return str(value).strip() or None


def _resolve_key(
    isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any
) -> MemoryKey | None:
    if explicit is not None:
        return explicit
    if tool_context is None:
        return None
    session = _part(extract_path(tool_context, isolation.session_key))
    if session is None:
        return None
    tenant = _part(extract_path(tool_context, isolation.tenant_key)) or "default"
    user = _part(extract_path(tool_context, isolation.user_key)) or "anonymous"
    return MemoryKey(tenant_id=tenant, user_id=user, session_id=session)


provider = dataclasses.replace(
    reference_provider,
    name="mutant-key005-misconfigured-part-takes-default",
    resolve_key=_resolve_key,
)
