"""BUD-008 broken: ``estimate_tokens()`` measures differently formatted JSON.

The estimator is applied to ``json.dumps(view)`` with Python's default formatting (spaces
after separators, ASCII escapes, insertion order) instead of the canonical JSON the spec
defines, so the number a caller budgets with is not the number of what it sends.
"""

from __future__ import annotations

import json

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import default_token_estimator

from . import mutant_provider

BREAKS = "BUD-008"
COLLATERAL: dict[str, str] = {}


class OtherJsonEstimateMemory(DefaultShortTermMemory):
    def estimate_tokens(self) -> int:
        estimator = self._config.token_estimator or default_token_estimator
        return estimator(json.dumps(self._view()))  # MUTATION: not the canonical JSON


provider = mutant_provider("bud008-estimate-on-other-json", OtherJsonEstimateMemory)
