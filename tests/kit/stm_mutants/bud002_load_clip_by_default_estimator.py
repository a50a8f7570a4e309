"""BUD-002 broken: a loaded summary over summary_max_tokens is clipped by the default
len//4+1 count, not by the configured token_estimator. With a heavier estimator the clipped
summary is still over summary_max_tokens (summarizer output is measured correctly)."""

from __future__ import annotations

from typing import Any

from reference_impl import memory as memory_module
from reference_impl.budget import Budget
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import default_token_estimator

from . import mutant_provider
from ._util import swapped

BREAKS = "BUD-002"
COLLATERAL: dict[str, str] = {}


class DefaultClipBudget(Budget):
    __slots__ = ()

    def clip_summary(self, text: str) -> str:
        limit = self.config.budget.summary_max_tokens
        low, high, best = 0, len(text), 0
        while low <= high:
            mid = (low + high) // 2
            tail = text[len(text) - mid :] if mid else ""
            # MUTATION: measured with the default estimator
            if (default_token_estimator(tail) if tail else 0) <= limit:
                best, low = mid, mid + 1
            else:
                high = mid - 1
        return text[len(text) - best :] if best else ""


class DefaultClipMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        with swapped(memory_module, "Budget", DefaultClipBudget):
            super().__init__(**kwargs)


provider = mutant_provider("bud002-load-clip-by-default-estimator", DefaultClipMemory)
