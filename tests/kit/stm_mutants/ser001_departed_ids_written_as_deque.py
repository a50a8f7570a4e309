"""SER-001 broken: ``to_dict()`` writes ``departed_turn_ids`` as the live deque.

Once a turn carrying a ``turn_id`` has left the memory (evicted by the window under
truncation, covered by a summary, dropped from the backlog), ``to_dict()`` holds a
``collections.deque`` under ``departed_turn_ids``, which ``json.dumps`` rejects: the
``list(...)`` was forgotten. States without turn ids, and ``persist`` (which dumps on its
own path), are unchanged.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-001"
COLLATERAL: dict[str, str] = {}


class DequeIdsMemory(DefaultShortTermMemory):
    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        if "departed_turn_ids" in data:
            data["departed_turn_ids"] = self._state.departed  # MUTATION: not list(...)
        return data


provider = mutant_provider("ser001-departed-ids-written-as-deque", DequeIdsMemory)
