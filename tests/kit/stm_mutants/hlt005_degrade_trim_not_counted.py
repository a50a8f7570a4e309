"""HLT-005 broken: turns cut from the backlog when the memory degrades are not counted.

Entering DEGRADED, the pending turns move to the backlog, which is cut to
``recovery_backlog_limit`` (the oldest go), but ``dropped_turns`` is left as it was before
the move: only turns dropped by evictions while already DEGRADED are counted.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-005"
COLLATERAL: dict[str, str] = {}


class UncountedDegradeMemory(DefaultShortTermMemory):
    _dropped_before_call = 0

    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        self._dropped_before_call = self._state.dropped_turns
        return await super()._call(batch)

    def _transition(self, change: Transition) -> None:
        old, new = change
        if new is MemoryHealth.DEGRADED and old is not MemoryHealth.RECOVERING:
            # MUTATION: the pending turns just moved to the backlog and cut: not counted
            self._state.dropped_turns = self._dropped_before_call
        super()._transition(change)


provider = mutant_provider("hlt005-degrade-trim-not-counted", UncountedDegradeMemory)
