"""WM-005 broken: loading a HEALTHY or RETRY state that records backlog turns appends them
*after* its pending turns.

A backlog outside DEGRADED (written by an older release, or another backend, that left
it there after a recovery) is merged into pending as ``pending.extend(backlog)`` instead of
``backlog + pending``. The backlog turns are the oldest the state holds (its seqs rise from
the backlog through pending, SER-003), so the view then shows pending turns out of order:
newer pending turns before older ones. WM-005: "pending (oldest first)". States the
reference writes itself never hold a backlog while HEALTHY, so round trips are unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-005"
COLLATERAL: dict[str, str] = {}


def _merged_backlog(state: Any) -> int:
    """How many backlog turns a load of ``state`` merges into pending."""
    if not isinstance(state, Mapping) or state.get("health") not in ("healthy", "retry"):
        return 0
    backlog = state.get("backlog")
    return len(backlog) if isinstance(backlog, list) else 0


class BacklogLastMemory(DefaultShortTermMemory):
    _merged = 0

    def from_dict(self, state: Mapping[str, Any]) -> None:
        self._merged = _merged_backlog(state)
        super().from_dict(state)

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        self._merged = _merged_backlog(state)
        await super().afrom_dict(state)

    def _install(self, loaded: MemoryState) -> None:
        n, self._merged = self._merged, 0
        if n and self._config.strategy == "rolling_summary":
            # MUTATION: pending.extend(backlog) -- the older turns go last
            loaded.pending = loaded.pending[n:] + loaded.pending[:n]
            self._budget.settle(loaded)
        super()._install(loaded)


provider = mutant_provider("wm005-healthy-backlog-loaded-after-pending", BacklogLastMemory)
