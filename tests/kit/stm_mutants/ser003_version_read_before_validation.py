"""SER-003 broken: ``from_dict`` reads ``state["version"]`` before checking what it was given.

To normalise version-1 states before they are upgraded (a health name is accepted in any
case) the backend looks at ``state["version"]`` first and validates afterwards. Anything
but a mapping with a ``version`` then fails with the error of that first look: a list or a
string raises ``TypeError``, a mapping without ``version`` raises ``KeyError``. Malformed
input must raise ``ValueError``, whatever it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}


class EagerVersionMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        if state["version"] == 1:  # MUTATION: indexed before `state` is known to be valid
            health = state.get("health")
            if isinstance(health, str):
                state = {**state, "health": health.lower()}
        super().from_dict(state)


provider = mutant_provider("ser003-version-read-before-validation", EagerVersionMemory)
