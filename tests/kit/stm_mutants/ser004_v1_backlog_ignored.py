"""SER-004 broken: a PenguiFlow version-1 state loads without its DEGRADED backlog.

The v1 record is validated and upgraded as the reference does (a ``none`` or
``truncation`` record with a backlog is still refused, SER-003), but the upgraded state's
backlog is then discarded: "a v1 backlog was queued under PenguiFlow's own recovery
rules". A v1 state saved DEGRADED loads DEGRADED with its recent turns, but the turns
that waited for recovery are gone: no recovery is ever sent them and ``dropped_turns``
does not count them. Spec, SER-004: "States written by PenguiFlow's
``DefaultShortTermMemory.to_dict()`` (version 1) MUST load"; WM-006: "No turn may be
discarded without a summary covering it, except on the DEGRADED backlog overflow path".
Version-2 states load as in the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-004"
COLLATERAL: dict[str, str] = {}


def _v1(state: Any) -> bool:
    return isinstance(state, Mapping) and state.get("version") == 1


class V1BacklogDiscardedMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        super().from_dict(state)
        if _v1(state):
            self._state.backlog.clear()  # MUTATION: the v1 backlog is dropped, uncounted

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        await super().afrom_dict(state)
        if _v1(state):
            self._state.backlog.clear()  # MUTATION: likewise through hydrate


provider = mutant_provider("ser004-v1-backlog-ignored", V1BacklogDiscardedMemory)
