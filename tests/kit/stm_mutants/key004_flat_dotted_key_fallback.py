"""KEY-004 broken: a dotted path that leads nowhere in ``tool_context`` falls back to a
flat key spelled like the whole path.

With ``session_key="conv.id"``, ``{"conv": {"id": "c9"}}`` resolves ``"c9"`` as in the
reference, but ``{"conv.id": "z"}`` (no ``conv`` mapping) resolves ``"z"``: a key part is
read from a place the configured path does not name ("support flattened contexts"). The
path is still preferred when it leads somewhere, so a flat decoy beside the nested value
changes nothing. Spec, KEY-004: "key parts MUST be resolved only from ``tool_context``
through the dotted paths of ``MemoryIsolation`` (nested mappings and attributes)".
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
    found = _extract_path(source, path)
    if found is None and "." in path and isinstance(source, Mapping):
        return source.get(path)  # MUTATION: the dotted path taken as one flat key
    return found


provider = key_resolving_provider("key004-flat-dotted-key-fallback", extract_path=extract_path)
