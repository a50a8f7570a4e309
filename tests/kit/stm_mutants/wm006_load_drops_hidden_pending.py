"""WM-006 broken: loading a state deletes the pending turns the budget hides.

After ``from_dict``/``hydrate`` the loaded state is brought within the budget, as the
reference does; the backend then "compacts" it: pending turns the budget hid from the view
are deleted rather than kept for the summarizer. Turns hidden at run time stay pending;
only a load (every request of a stateless worker that hydrates) loses them.
"""

from __future__ import annotations

from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-006"
COLLATERAL: dict[str, str] = {}


class CompactingLoadMemory(DefaultShortTermMemory):
    def _install(self, loaded: MemoryState) -> None:
        if loaded.visible_from:
            # MUTATION: hidden pending turns are deleted on load
            del loaded.pending[: loaded.visible_from]
            loaded.visible_from = 0
        super()._install(loaded)


provider = mutant_provider("wm006-load-drops-hidden-pending", CompactingLoadMemory)
