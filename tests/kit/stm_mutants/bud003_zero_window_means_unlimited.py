"""BUD-003 broken: ``full_zone_turns=0`` is read as "no limit on recent turns".

``total_max_tokens=0`` means "no token limit", and the backend reads ``full_zone_turns``
the same way: with a window of 0 every turn stays recent (evicted only by the token
budget), under ``truncation`` and ``rolling_summary`` alike. A window of 0 means no recent
turn at all. Windows of one turn or more are kept as by the reference.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ShortTermMemoryConfig

from . import mutant_provider

BREAKS = "BUD-003"
COLLATERAL: dict[str, str] = {}


class ZeroMeansUnlimitedMemory(DefaultShortTermMemory):
    def __init__(self, *, config: ShortTermMemoryConfig, **kwargs: Any) -> None:
        budget = config.budget
        if budget.full_zone_turns == 0:
            # MUTATION: 0 taken as "unlimited", like total_max_tokens=0
            budget = dataclasses.replace(budget, full_zone_turns=sys.maxsize)
            config = dataclasses.replace(config, budget=budget)
        super().__init__(config=config, **kwargs)


provider = mutant_provider("bud003-zero-window-means-unlimited", ZeroMeansUnlimitedMemory)
