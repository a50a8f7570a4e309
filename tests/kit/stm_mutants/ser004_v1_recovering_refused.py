"""SER-004 broken: a PenguiFlow version-1 state saved while RECOVERING is refused.

The v1 migration maps PenguiFlow's health names through a table written from the states
a memory "rests" in (healthy, retry, degraded); ``recovering`` was left out as transient.
But PenguiFlow's ``to_dict()`` writes ``"recovering"`` whenever it is persisted while a
recovery attempt runs, and such a record is refused with ``ValueError`` (by ``from_dict``;
``hydrate`` then fails too). Version-2 states and other v1 states load as by the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl import schema

from . import mutant_provider
from ._util import own_loads_only

BREAKS = "SER-004"
COLLATERAL: dict[str, str] = {}

_original = schema._upgrade_v1
_V1_HEALTH = {"healthy", "retry", "degraded"}  # MUTATION: no "recovering"


def _upgrade_v1(data: Mapping[str, Any]) -> Any:
    health = data.get("health") if isinstance(data, Mapping) else None
    if health not in _V1_HEALTH:
        raise ValueError(f"unknown version-1 health {health!r}")
    return _original(data)


provider = mutant_provider(
    "ser004-v1-recovering-refused", own_loads_only(schema, "_upgrade_v1", _upgrade_v1)
)
