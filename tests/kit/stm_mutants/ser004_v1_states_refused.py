"""SER-004 broken: states written by PenguiFlow (version 1) are refused.

``from_dict`` only accepts the reference's own version-2 format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-004"
COLLATERAL: dict[str, str] = {}


class V2OnlyMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        if isinstance(state, Mapping) and state.get("version") == 1:
            raise ValueError("unsupported memory state version: 1")  # MUTATION: no upgrade
        super().from_dict(state)


provider = mutant_provider("ser004-v1-states-refused", V2OnlyMemory)
