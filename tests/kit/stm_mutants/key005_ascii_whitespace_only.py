"""KEY-005 broken: key parts are stripped of ASCII whitespace only (strip(" \\t\\r\\n")),
so a session id of NBSP / ideographic space resolves to a whitespace-only session."""

from __future__ import annotations

from typing import Any

from reference_impl import keys

from ._util import key_resolving_provider

BREAKS = "KEY-005"
COLLATERAL: dict[str, str] = {}


def _part(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        return keys._UNUSABLE
    return str(value).strip(" \t\r\n") or None  # MUTATION: ASCII whitespace only


provider = key_resolving_provider("key005-ascii-whitespace-only", _part=_part)
