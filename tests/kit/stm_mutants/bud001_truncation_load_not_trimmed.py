"""BUD-001 broken: from_dict of a truncation state does not apply the token budget
("the state was written under a budget"): loaded into a memory with a smaller
total_max_tokens, the view stays over it until the next add_turn. The window is applied;
rolling_summary states are settled as by the reference."""

from __future__ import annotations

from typing import Any

from reference_impl import memory as memory_module
from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import swapped

BREAKS = "BUD-001"
COLLATERAL: dict[str, str] = {}


class TrustingBudget(Budget):
    __slots__ = ()

    def settle(self, state: MemoryState) -> None:
        if self.config.strategy == "truncation":
            return  # MUTATION: a loaded truncation state is trusted to fit
        super().settle(state)


class TrustingMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        with swapped(memory_module, "Budget", TrustingBudget):
            super().__init__(**kwargs)


provider = mutant_provider("bud001-truncation-load-not-trimmed", TrustingMemory)
