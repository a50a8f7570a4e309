"""Fail-closed resolution of a :class:`MemoryKey` for one call (KEY-003..006)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .types import MemoryIsolation, MemoryKey

__all__ = ["extract_path", "resolve_memory_key"]

logger = logging.getLogger("reference_impl.keys")

_MISSING = object()


def extract_path(source: Any, path: str) -> Any:
    """Follow a dotted path through nested mappings and attributes; ``None`` when absent."""
    current = source
    for part in path.split("."):
        if isinstance(current, Mapping):
            current = current.get(part, _MISSING)
        else:
            current = getattr(current, part, _MISSING)
        if current is _MISSING:
            return None
    return current


#: A part found with a type no key part can have: the key does not resolve at all.
_UNUSABLE = object()


def _part(value: Any) -> Any:
    """The text of a key part (``None``: missing or blank; ``_UNUSABLE``: another type)."""
    if value is None:
        return None
    # Only strings and integers name a key part. A mapping or object is a misconfigured
    # path: guessing its string form, or falling back to a default, could merge unrelated
    # callers (every tenant into "default"), so nothing resolves (KEY-005).
    if isinstance(value, bool) or not isinstance(value, str | int):
        return _UNUSABLE
    return str(value).strip() or None


def resolve_memory_key(
    isolation: MemoryIsolation,
    *,
    memory_key: MemoryKey | None = None,
    tool_context: Any = None,
) -> MemoryKey | None:
    """The key for one call, or ``None`` when memory must stay off for it.

    An explicit ``memory_key`` wins. Otherwise the parts come from ``tool_context`` only
    (never ``llm_context``, which the model sees): a string, stripped of surrounding
    whitespace, or an integer. Tenant and user default to ``"default"`` and
    ``"anonymous"`` only when a session id resolves and they are missing or blank; a part
    of any other type (a mapping, an object, a float, a bool) resolves nothing, never a
    default (KEY-005). ``None`` means disabled when
    ``isolation.require_explicit_key`` is true; otherwise the caller may mint an ephemeral
    key of its own (see ``reference_impl.session``).
    """
    if memory_key is not None:
        if not isinstance(memory_key, MemoryKey):
            raise TypeError("memory_key must be a MemoryKey")
        return memory_key
    if tool_context is None:
        return None
    session = _part(extract_path(tool_context, isolation.session_key))
    tenant = _part(extract_path(tool_context, isolation.tenant_key))
    user = _part(extract_path(tool_context, isolation.user_key))
    if _UNUSABLE in (session, tenant, user):
        # A path that reaches a container is a configuration error, not a caller's: say so.
        found = {"session": session, "tenant": tenant, "user": user}
        logger.warning(
            "memory key not resolved: the %s path of MemoryIsolation reaches neither a "
            "string nor an integer in tool_context",
            " and ".join(name for name, part in found.items() if part is _UNUSABLE),
        )
        return None
    if session is None:
        return None
    return MemoryKey(tenant_id=tenant or "default", user_id=user or "anonymous", session_id=session)
