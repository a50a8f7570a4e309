"""Fail-closed resolution of a :class:`MemoryKey` for one call (KEY-003..006)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .types import MemoryIsolation, MemoryKey

__all__ = ["extract_path", "resolve_memory_key"]

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


def _scalar(value: Any) -> str | None:
    # Only strings and integers name a key part; a dict or object is a misconfiguration,
    # and guessing its string form could merge unrelated callers.
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value).strip()
    return text or None


def resolve_memory_key(
    isolation: MemoryIsolation,
    *,
    memory_key: MemoryKey | None = None,
    tool_context: Any = None,
) -> MemoryKey | None:
    """The key for one call, or ``None`` when memory must stay off for it.

    An explicit ``memory_key`` wins. Otherwise the parts come from ``tool_context`` only
    (never ``llm_context``, which the model sees); tenant and user default to ``"default"``
    and ``"anonymous"`` only when a session id resolves. ``None`` means disabled when
    ``isolation.require_explicit_key`` is true; otherwise the caller may mint an ephemeral
    key of its own (see ``reference_impl.session``).
    """
    if memory_key is not None:
        if not isinstance(memory_key, MemoryKey):
            raise TypeError("memory_key must be a MemoryKey")
        return memory_key
    if tool_context is None:
        return None
    session = _scalar(extract_path(tool_context, isolation.session_key))
    if session is None:
        return None
    tenant = _scalar(extract_path(tool_context, isolation.tenant_key)) or "default"
    user = _scalar(extract_path(tool_context, isolation.user_key)) or "anonymous"
    return MemoryKey(tenant_id=tenant, user_id=user, session_id=session)
