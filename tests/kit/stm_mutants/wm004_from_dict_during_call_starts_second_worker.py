"""WM-004 broken: ``from_dict`` during a summarizer call starts a second worker.

Loading a state "restarts summarization from the loaded state": the worker handle is
replaced by a fresh worker while the old one is still awaiting its summarizer call. The
old worker, finding its state replaced when the call returns, goes on with the loaded
state too, so from then on two workers call the summarizer concurrently for one memory
(and may send the same pending turns twice). At most one call per memory may be in
flight. A load while no call runs starts one worker, as in the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-004"
COLLATERAL: dict[str, str] = {}


class RestartingLoadMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        worker = self._worker
        try:
            # MUTATION: the running worker is forgotten, not stopped: the load starts another
            self._worker = None
            super().from_dict(state)
        except ValueError:
            self._worker = worker  # a refused load changes nothing
            raise


provider = mutant_provider("wm004-from-dict-during-call-starts-second-worker", RestartingLoadMemory)
