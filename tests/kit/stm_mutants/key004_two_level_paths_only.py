"""KEY-004 broken: a dotted path of MemoryIsolation is followed one level deep only
(``head, _, rest = path.partition(".")``; ``rest`` is then looked up as one key), so a path
of three or more segments ("request.org.id") resolves nothing. One- and two-segment
paths resolve as by the reference."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl import keys

from ._util import key_resolving_provider

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


provider = key_resolving_provider("key004-two-level-paths-only", extract_path=_extract)
