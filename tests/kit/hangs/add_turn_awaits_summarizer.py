"""WM-001 broken, naively: ``add_turn`` awaits the summarizer call it starts.

After recording the turn, ``add_turn`` awaits the summarizer worker, unbounded: while a
check holds the summarizer, ``add_turn`` never returns.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn
from stm_conformance._deadline import AWAITED_FOREVER

from . import hang_provider

FAILS = "WM-001"
REASON = AWAITED_FOREVER
CHECK = "test_add_turn_does_not_wait_for_the_summarizer"
# 105-120 s on an idle machine: 129 checks each wait out the kit's add_turn limit. The
# meta-test runs it beside fourteen other suite runs and the rest of the tests, which
# added 20-105 s on two cores (203 and 209 s in runs of the project's tests). Without the
# kit's own limits, its checks would wait out --stm-timeout: hours.
WALL_S = 400


class AwaitingMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        await super().add_turn(turn)
        worker = self._worker
        if worker is not None and not worker.done():
            await worker  # MUTATION: wait for the summarizer inline


provider = hang_provider("add-turn-awaits-summarizer", AwaitingMemory)
