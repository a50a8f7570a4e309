"""BUD-006 broken: under overflow_policy="error" the turn is measured by its user and
assistant text only; its trajectory digest is left out of the would-be view, so a turn
whose digest takes the view over total_max_tokens is accepted."""

from __future__ import annotations

from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import Entry, MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-006"
COLLATERAL: dict[str, str] = {}


class TextOnlyBudget(Budget):
    __slots__ = ()

    def fits_after_add(self, state: MemoryState, entry: Entry) -> bool:
        # MUTATION: the digest is not part of what is measured
        plain = Entry.make(entry.seq, entry.turn, include_digest=False)
        return super().fits_after_add(state, plain)


class TextOnlyMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = TextOnlyBudget.for_config(self._config)


provider = mutant_provider("bud006-digest-not-measured", TextOnlyMemory)
