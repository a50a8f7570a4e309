"""KEY-004 broken: a dotted path is first looked up as one literal key of a ``tool_context``
mapping ("flattened" contexts), then followed as a path.

With ``session_key="conv.id"``, ``{"conv.id": "x"}`` resolves session ``"x"``, and
``{"conv.id": "x", "conv": {"id": "y"}}`` resolves ``"x"`` where the path leads to
``"y"``. Key parts are read from places the configured path does not name. Spec, KEY-004:
"key parts MUST be resolved only from ``tool_context`` through the dotted paths of
``MemoryIsolation`` (nested mappings and attributes)".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl import keys

from ._util import key_resolving_provider

BREAKS = "KEY-004"
COLLATERAL: dict[str, str] = {}

_extract_path = keys.extract_path


def extract_path(source: Any, path: str) -> Any:
    if "." in path and isinstance(source, Mapping) and path in source:
        return source[path]  # MUTATION: the dotted path taken as one flat key
    return _extract_path(source, path)


provider = key_resolving_provider("key004-flat-dotted-key-accepted", extract_path=extract_path)
