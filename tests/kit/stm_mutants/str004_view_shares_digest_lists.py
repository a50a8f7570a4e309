"""STR-004 broken: the view shares each digest's lists with the memory.

A turn with a trajectory digest is copied for the view one level deep: ``tools_invoked``
and ``artifacts_refs`` in a returned view are the memory's own lists. A caller that edits
the view it got (appending a tool as it builds its prompt) changes how the turn renders in
every later view, while ``estimate_tokens()`` and ``to_dict()`` keep the turn as added.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "STR-004"
COLLATERAL: dict[str, str] = {}


def _shallow(rendered: dict[str, Any]) -> dict[str, Any]:
    fresh = rendered.copy()
    digest = fresh.get("trajectory_digest")
    if digest is not None:
        fresh["trajectory_digest"] = dict(digest)  # MUTATION: its lists are the memory's
    return fresh


class SharedDigestMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        first = self._state.next_seq
        await super().add_turn(turn)
        state = self._state
        for entry in (*state.recent, *state.pending, *state.backlog):
            if entry.seq >= first and "trajectory_digest" in entry.rendered:
                entry.fresh = partial(_shallow, entry.rendered)


provider = mutant_provider("str004-view-shares-digest-lists", SharedDigestMemory)
