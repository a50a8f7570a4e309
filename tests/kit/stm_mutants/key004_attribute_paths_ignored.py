"""KEY-004 broken: dotted paths are followed through mappings only, not attributes.

A ``tool_context`` (or a part of it) that is an object, such as a request context or a
dataclass, resolves nothing: ``MemoryIsolation(session_key="conv.id")`` finds the session
in ``{"conv": {"id": ...}}`` but not in ``{"conv": Conversation(id=...)}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._util import key_resolving_provider

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


provider = key_resolving_provider("key004-attribute-paths-ignored", extract_path=_extract)
