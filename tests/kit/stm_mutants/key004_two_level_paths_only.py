"""KEY-004 broken: a dotted path of MemoryIsolation is followed one level deep only
(``head, _, rest = path.partition(".")``; ``rest`` is then looked up as one key), so a path
of three or more segments ("request.org.id") resolves nothing. One- and two-segment
paths resolve as by the reference."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from reference_impl import keys
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryIsolation, MemoryKey

from . import mutant_provider

BREAKS = "KEY-004"
COLLATERAL: dict[str, str] = {}


def _step(current: Any, part: str) -> Any:
    if isinstance(current, Mapping):
        return current.get(part, keys._MISSING)
    return getattr(current, part, keys._MISSING)


def _extract(source: Any, path: str) -> Any:
    head, _, rest = path.partition(".")  # MUTATION: one level of nesting
    current = _step(source, head)
    if current is not keys._MISSING and rest:
        current = _step(current, rest)
    return None if current is keys._MISSING else current


def _resolve(isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any):
    original = keys.extract_path
    keys.extract_path = _extract
    try:
        return keys.resolve_memory_key(isolation, memory_key=explicit, tool_context=tool_context)
    finally:
        keys.extract_path = original


provider = dataclasses.replace(
    mutant_provider("key004-two-level-paths-only", DefaultShortTermMemory),
    resolve_key=_resolve,
)
