"""BUD-002 broken: with ``summary_max_tokens=0`` a loaded summary is kept whole.

The loader clips a stored summary over ``summary_max_tokens`` as the reference does, but
guards the clip with ``if limit and ...``, the usual "0 means no limit" idiom: a state
with a summary loaded into a memory whose ``summary_max_tokens`` is 0 keeps that summary,
whose size is then above 0. Summaries from the summarizer are judged as by the reference
(every non-empty one fails under a limit of 0).
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

from reference_impl.budget import Budget

from . import mutant_provider
from ._util import with_budget

BREAKS = "BUD-002"
COLLATERAL: dict[str, str] = {}

_loading: contextvars.ContextVar[bool] = contextvars.ContextVar("bud002-loading", default=False)


class ZeroLimitLoadBudget(Budget):
    __slots__ = ()

    def summary_fits(self, summary: str) -> bool:
        if _loading.get() and not self.config.budget.summary_max_tokens:
            return True  # MUTATION: a limit of 0 is taken as no limit when loading
        return super().summary_fits(summary)


class ZeroLimitLoadMemory(with_budget(ZeroLimitLoadBudget)):  # type: ignore[misc]
    def from_dict(self, state: Mapping[str, Any]) -> None:
        token = _loading.set(True)
        try:
            super().from_dict(state)
        finally:
            _loading.reset(token)

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        token = _loading.set(True)
        try:
            await super().afrom_dict(state)
        finally:
            _loading.reset(token)


provider = mutant_provider("bud002-zero-limit-loaded-summary-kept", ZeroLimitLoadMemory)
