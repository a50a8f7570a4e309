"""KEY-005 broken: a whitespace-only session id counts as a session.

Key parts are not stripped before the emptiness test, so ``session_id="   "`` resolves a
key, ``("default", "anonymous", "   ")`` with no tenant or user given, shared by every
caller that sends a blank session.
"""

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
    return str(value) or None  # MUTATION: not stripped, so "   " is a part


provider = key_resolving_provider("key005-whitespace-session-resolves", _part=_part)
