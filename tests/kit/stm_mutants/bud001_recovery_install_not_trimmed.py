"""BUD-001 broken: the view is not brought within ``total_max_tokens`` after a successful
recovery.

"A recovery only removes turns": after a recovery attempt succeeds, the worker recounts the
visible pending turns but skips the trimming it does after every other outcome. But the
recovery brings back the summary and turns the DEGRADED view hid (the turns evicted during
the attempt become pending, and visible): the view can exceed the budget until the next
``add_turn``. Spec, BUD-001: "After every operation, with ``total_max_tokens > 0`` and a
truncate policy, ``estimate_tokens() <= total_max_tokens``."
"""

from __future__ import annotations

from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "BUD-001"
COLLATERAL: dict[str, str] = {}

_RECOVERED: set[int] = set()  # ids of states whose last outcome was a successful recovery


class NoTrimAfterRecoveryBudget(Budget):
    __slots__ = ()

    def settle(self, state: MemoryState) -> None:
        if id(state) in _RECOVERED:
            _RECOVERED.discard(id(state))
            state.show_all_pending()  # MUTATION: recounted, not trimmed
            return
        super().settle(state)


class NoTrimAfterRecoveryMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = NoTrimAfterRecoveryBudget.for_config(self._config)

    def _transition(self, change: Transition) -> None:
        if change == (MemoryHealth.RECOVERING, MemoryHealth.HEALTHY):
            _RECOVERED.add(id(self._state))
        super()._transition(change)


provider = mutant_provider("bud001-recovery-install-not-trimmed", NoTrimAfterRecoveryMemory)
