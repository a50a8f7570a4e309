"""KEY-005 broken: key parts are stripped of ASCII whitespace only (strip(" \\t\\r\\n")),
so a session id of NBSP / ideographic space resolves to a whitespace-only session."""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl import keys
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryIsolation, MemoryKey

from . import mutant_provider

BREAKS = "KEY-005"
COLLATERAL: dict[str, str] = {}


def _part(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        return keys._UNUSABLE
    return str(value).strip(" \t\r\n") or None  # MUTATION: ASCII whitespace only


def _resolve(isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any):
    original = keys._part
    keys._part = _part
    try:
        return keys.resolve_memory_key(isolation, memory_key=explicit, tool_context=tool_context)
    finally:
        keys._part = original


provider = dataclasses.replace(
    mutant_provider("key005-ascii-whitespace-only", DefaultShortTermMemory),
    resolve_key=_resolve,
)
