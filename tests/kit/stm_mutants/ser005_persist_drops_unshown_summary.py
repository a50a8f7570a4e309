"""SER-005 broken: ``persist`` of a DEGRADED (or RECOVERING) memory saves no summary.

``persist`` writes the summary as the view has it: a memory whose summarizer is down
shows recent turns only, so the record gets ``"summary": ""``. ``to_dict()`` keeps the
summary (its own path), so ``from_dict`` round trips are exact; but a memory hydrated
from the store has lost the summary of everything before the outage, and its recovery
summarizes the backlog from nothing. Spec, SER-005: "a state persisted and hydrated into
a fresh memory satisfies SER-002" (observably identical: the summary a DEGRADED memory
keeps is what its recovery is sent, WM-004).
"""

from __future__ import annotations

from typing import Any

from reference_impl import schema
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import _on, _switch

BREAKS = "SER-005"
COLLATERAL: dict[str, str] = {}

_dump_reusing = schema.dump_reusing


def _dump_as_shown(state: Any, config: Any, previous: Any) -> Any:
    data, records = _dump_reusing(state, config, previous)
    if state.health.degraded:
        data["summary"] = ""  # MUTATION: the summary the view does not show is not saved
    return data, records


_active = _switch(schema, "dump_reusing", _dump_as_shown)


class ShownSummaryPersistMemory(DefaultShortTermMemory):
    def _persisting(self, store: Any, key: str) -> Any:
        with _on(_active):
            return super()._persisting(store, key)


provider = mutant_provider("ser005-persist-drops-unshown-summary", ShownSummaryPersistMemory)
