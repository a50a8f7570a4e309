"""WM-004 broken: a failed call the replaced state began counts on the loaded state.

The worker drops the *summary* of a call whose state ``from_dict`` replaced meanwhile, as in the
reference, but the failure path records the failure on ``self._state`` (the loaded state), so a
stale call's failure moves a freshly loaded HEALTHY state to RETRY (and can degrade it).
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import WorkerChange, work

BREAKS = "WM-004"
COLLATERAL: dict[str, str] = {}


class StaleFailureMemory(DefaultShortTermMemory):
    async def _work(self) -> None:
        # MUTATION: the failure is recorded on whatever state is current now
        await work(self, WorkerChange(failure_counts_on_current_state=True))


provider = mutant_provider("wm004-stale-failure-counts-on-loaded-state", StaleFailureMemory)
