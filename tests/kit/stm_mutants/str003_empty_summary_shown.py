"""STR-003 broken: once a summary has been installed, the view always has a "summary" key,
"" included (an installed empty summary, or one the budget shortened to nothing):
`if state.summary is not None`. The budget and estimate_tokens() measure the view as shown,
so only the shape is wrong."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from reference_impl import memory as memory_module
from reference_impl import watermark
from reference_impl.budget import Budget, _part
from reference_impl.entries import Entry, MemoryState, render_view
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import swapped

BREAKS = "STR-003"
COLLATERAL: dict[str, str] = {}

EMPTY = '""'


def _shows_empty(config: Any, state: MemoryState) -> bool:
    return (
        config.strategy == "rolling_summary"
        and not state.health.degraded
        and state.summarized_through > 0
        and not state.summary
    )


@contextlib.contextmanager
def _counted(config: Any, state: MemoryState) -> Iterator[None]:
    if not _shows_empty(config, state):
        yield
        return
    state.summary_json = EMPTY
    try:
        yield
    finally:
        state.summary_json = None


class EmptyShownBudget(Budget):
    __slots__ = ()

    def tokens(self, state: MemoryState) -> int:
        with _counted(self.config, state):
            return super().tokens(state)

    def fits_after_add(self, state: MemoryState, entry: Entry) -> bool:
        with _counted(self.config, state):
            return super().fits_after_add(state, entry)

    def fits_after_install(self, state: MemoryState, batch: watermark.Batch, summary: str) -> bool:
        if summary or not self.limit:
            return super().fits_after_install(state, batch, summary)
        self.start_metering(state)
        source = state.backlog if batch.recovering else state.pending
        pending = [e for e in source if e.seq > batch.through]
        tokens = self.meter.view_tokens(EMPTY, _part(pending), _part(state.recent))
        return tokens <= self.limit


class EmptyShownMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        with swapped(memory_module, "Budget", EmptyShownBudget):
            super().__init__(**kwargs)

    def _view(self) -> dict[str, Any]:
        view = render_view(self._config.strategy, self._state)
        if _shows_empty(self._config, self._state):
            view["conversation_memory"]["summary"] = ""  # MUTATION: "" shown, not left out
        return view


provider = mutant_provider("str003-empty-summary-shown", EmptyShownMemory)
