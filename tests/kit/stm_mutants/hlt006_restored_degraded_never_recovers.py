"""HLT-006 broken: a memory restored in DEGRADED attempts no recovery until a turn arrives.

``from_dict`` starts the summarizer worker only when the loaded state has pending turns
("work to do"); a DEGRADED state keeps its turns in the backlog, so nothing is scheduled.
The restored memory stays DEGRADED with a non-empty backlog, however long it waits and
however healthy the summarizer is, until the next ``add_turn`` wakes the worker. A memory
that degrades while running recovers by itself as in the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-006"
COLLATERAL = {
    "SER-002": (
        "a memory restored in DEGRADED does not go on as the one it was saved from, which "
        "attempts recovery by itself"
    ),
}


class IdleAfterLoadMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._loading = False

    def from_dict(self, state: Mapping[str, Any]) -> None:
        self._loading = True
        try:
            super().from_dict(state)
        finally:
            self._loading = False
        if self._state.pending and self._config.strategy == "rolling_summary":
            self._wake()  # MUTATION: woken for pending turns only, never for the backlog

    def _wake(self) -> None:
        if not self._loading:
            super()._wake()


provider = mutant_provider("hlt006-restored-degraded-never-recovers", IdleAfterLoadMemory)
