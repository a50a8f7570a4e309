"""BUD-009 broken: the satisfiability test measures ``{}`` instead of the empty memory view.

At construction the backend checks that ``total_max_tokens`` fits "an empty memory",
measured as the view of strategy ``none`` (``"{}"``, 1 token) instead of the empty view of
the configured strategy (``{"conversation_memory":{"recent_turns":[]}}``, 12 tokens). A
budget of 1 to 11 tokens is accepted, and the first ``add_turn`` finds a view it can never
trim to fit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl.budget import Budget
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ShortTermMemoryConfig

from . import mutant_provider

BREAKS = "BUD-009"
COLLATERAL: dict[str, str] = {}


class BracesBudget(Budget):
    __slots__ = ()

    def check_satisfiable(self) -> None:
        if self.config.strategy == "none" or not self.limit:
            return
        empty = self.meter.estimator("{}")  # MUTATION: not the strategy's empty view
        if empty > self.limit:
            raise ValueError(f"total_max_tokens={self.limit} is below {empty} tokens")


class BracesBudgetMemory(DefaultShortTermMemory):
    def __init__(self, *, config: ShortTermMemoryConfig, **kwargs: Any) -> None:
        budget = BracesBudget.for_config(config)
        # Built without a limit, so the reference's own test does not run first.
        unlimited = dataclasses.replace(
            config, budget=dataclasses.replace(config.budget, total_max_tokens=0)
        )
        super().__init__(config=unlimited, **kwargs)
        self._config = config
        self._budget = budget


provider = mutant_provider("bud009-empty-view-measured-as-braces", BracesBudgetMemory)
