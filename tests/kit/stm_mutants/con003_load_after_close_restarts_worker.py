"""CON-003 broken: a memory closed with ``aclose()`` starts a new worker when a state is loaded.

``_wake`` checks only whether a worker is running, not whether the memory was closed, and the
worker loops until it runs out of work (``aclose()`` cancels it, so the closed flag seemed
redundant there): a ``from_dict``/``hydrate`` after ``aclose()`` (a router reusing a closed
memory object) starts a summarizer worker that nobody will ever cancel.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import WorkerChange, work

BREAKS = "CON-003"
COLLATERAL: dict[str, str] = {}


class ReopeningMemory(DefaultShortTermMemory):
    def _wake(self) -> None:
        closed, self._closed = self._closed, False  # MUTATION: _wake ignores the closed flag
        try:
            super()._wake()
        finally:
            self._closed = closed

    async def _work(self) -> None:
        # MUTATION: the loop relies on aclose() cancelling it
        await work(self, WorkerChange(stops_when_closed=False))


provider = mutant_provider("con003-load-after-close-restarts-worker", ReopeningMemory)
