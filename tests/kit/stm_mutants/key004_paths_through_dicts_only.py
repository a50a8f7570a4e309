"""KEY-004 broken: dotted paths step into ``dict`` only, not any ``Mapping``.

``extract_path`` tests ``isinstance(current, dict)`` where the reference tests
``Mapping``: a ``tool_context`` (or a level of it) that is a read-only mapping
(``types.MappingProxyType``, a pydantic/attrs mapping view, a ``ChainMap``...) is read
with ``getattr``, finds nothing, and the key does not resolve.
"""

from __future__ import annotations

from typing import Any

from ._util import key_resolving_provider

BREAKS = "KEY-004"
COLLATERAL: dict[str, str] = {}


def extract_path(source: Any, path: str) -> Any:
    current = source
    for part in path.split("."):
        # MUTATION: dict, not collections.abc.Mapping
        current = current.get(part) if isinstance(current, dict) else getattr(current, part, None)
        if current is None:
            return None
    return current


provider = key_resolving_provider("key004-paths-through-dicts-only", extract_path=extract_path)
