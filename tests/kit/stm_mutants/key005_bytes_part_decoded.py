"""KEY-005 broken: a key part found as ``bytes`` is decoded as UTF-8 and used.

ASGI scopes and many header mappings hand out ``bytes`` (``b"conv-42"``); a resolver that
"helpfully" decodes them resolves a key from a part of a type that is neither a string nor
an integer. KEY-005: "A part found with any other type ... MUST resolve nothing: neither a
default nor its string form." Strings and integers resolve as before.
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
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", "replace")  # MUTATION: bytes taken as text
    if isinstance(value, bool) or not isinstance(value, str | int):
        return keys._UNUSABLE
    return str(value).strip() or None


provider = key_resolving_provider("key005-bytes-part-decoded", _part=_part)
