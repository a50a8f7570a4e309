"""BUD-002 broken: ``hydrate`` installs a stored summary over ``summary_max_tokens`` whole.

``from_dict`` clips a loaded summary over the limit to its newest text, as the reference
does; ``hydrate`` (the asynchronous, stepwise load, ``afrom_dict``) trusts records it
reads from the store ("a memory wrote them, so they are within budget") and skips the
clip. A record written under a larger ``summary_max_tokens`` (a configuration change
across a deploy) hydrates with its whole summary. Spec, BUD-002: "The size of the
installed summary MUST NOT exceed ``summary_max_tokens``" (section 10: "a loaded summary
over ``summary_max_tokens`` is clipped or refused").
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from reference_impl import schema
from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-002"
COLLATERAL: dict[str, str] = {}


class TrustingBudget(Budget):
    __slots__ = ()

    def summary_fits(self, summary: str) -> bool:
        return True  # MUTATION: a stored summary is taken as within summary_max_tokens


class TrustingHydrateMemory(DefaultShortTermMemory):
    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        budget = TrustingBudget(self._config, self._budget.meter)
        steps = schema.load_steps(state, self._config, budget, self._state.key)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                loaded: MemoryState = done.value
                break
            await asyncio.sleep(0)
        self._install(loaded)


provider = mutant_provider("bud002-hydrated-summary-not-clipped", TrustingHydrateMemory)
