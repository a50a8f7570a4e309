"""KEY-005 broken: a key part of another type than a string or an integer takes its default.

A ``tenant_key`` path that stops one level short (``tenant`` where the tenant is
``tenant.id``) reaches a mapping. The mutant treats it as missing, so every tenant that
sends one resolves the tenant ``"default"``, and two tenants' sessions of the same id
share a memory. The reference resolves no key at all for it.
"""

from __future__ import annotations

from typing import Any

from ._util import key_resolving_provider

BREAKS = "KEY-005"
COLLATERAL: dict[str, str] = {}


def _part(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None  # MUTATION: a mapping, object, float or bool counts as missing
    return str(value).strip() or None


provider = key_resolving_provider("key005-misconfigured-part-takes-default", _part=_part)
