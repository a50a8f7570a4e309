"""BUD-008 broken: ``estimate_tokens()`` is memoized by the shape of the view.

The estimate is cached under (health, number of recent turns, number of visible pending
turns, length of the summary): an estimate for a view of the same shape, whatever the
turns' text, is answered from the cache. Budget enforcement measures afresh, so the view
itself is trimmed right; only the number reported goes stale.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-008"
COLLATERAL: dict[str, str] = {}


class MemoizedEstimateMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._estimates: dict[tuple[Any, ...], int] = {}

    def estimate_tokens(self) -> int:
        state = self._state
        shape = (
            state.health.state,
            len(state.recent),
            len(state.pending) - state.visible_from,
            len(state.summary),
        )
        if shape not in self._estimates:  # MUTATION: the shape, not the text
            self._estimates[shape] = super().estimate_tokens()
        return self._estimates[shape]


provider = mutant_provider("bud008-estimate-memoized-by-shape", MemoizedEstimateMemory)
