"""Capabilities a backend may declare, and the conformance levels built from them.

A capability only decides which checks run: checks of an undeclared capability are skipped.
Whether a capability actually works is decided by its probe checks, and levels are derived
from results alone (spec section 9); see :mod:`stm_conformance.report`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "CAPABILITIES",
    "CAPABILITY_DESCRIPTIONS",
    "LEVELS",
    "skip_reason",
    "undeclared",
]

#: What each capability promises, in the order reports list them.
CAPABILITY_DESCRIPTIONS: Mapping[str, str] = MappingProxyType(
    {
        "truncation": "strategy 'truncation' and the truncate/error overflow policies",
        "rolling_summary": "strategy 'rolling_summary' with background summarization and health",
        "serialization": "to_dict()/from_dict(), including PenguiFlow version-1 states",
        "persistence": "persist(store, key)/hydrate(store, key) through the store contract",
        "callbacks": "on_turn_added, on_summary_updated and on_health_changed",
        "key_resolution": "resolving a MemoryKey from tool_context (Provider.resolve_key)",
        "shared_state": "several instances on one key share state (Provider.create_peer)",
    }
)

#: Every capability name a provider may declare.
CAPABILITIES: frozenset[str] = frozenset(CAPABILITY_DESCRIPTIONS)

#: Conformance levels, lowest first: each needs every check of its capabilities (plus the
#: always-on checks) to pass. Each level includes the ones before it.
LEVELS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "Core": frozenset({"truncation"}),
        "Summary": frozenset({"truncation", "rolling_summary"}),
        "Durable": frozenset({"truncation", "rolling_summary", "serialization", "persistence"}),
        "Distributed": frozenset(
            {"truncation", "rolling_summary", "serialization", "persistence", "shared_state"}
        ),
    }
)


def undeclared(required: tuple[str, ...], declared: frozenset[str]) -> tuple[str, ...]:
    """The capabilities in ``required`` that a backend does not declare, in given order."""
    return tuple(name for name in required if name not in declared)


def skip_reason(capability: str) -> str:
    """The skip reason of a check whose capability is not declared."""
    return f"backend does not declare capability {capability!r}"
