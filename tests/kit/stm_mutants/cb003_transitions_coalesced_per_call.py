"""CB-003 broken: health changes are reported once per summarizer call, as the net change.

The worker compares the health before and after each attempt and reports that: a recovery
attempt that fails (DEGRADED -> RECOVERING -> DEGRADED) reports nothing, and one that
succeeds reports DEGRADED -> HEALTHY, skipping RECOVERING.
"""

from __future__ import annotations

from typing import Any

from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-003"
COLLATERAL: dict[str, str] = {}


class NetChangeMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._net: list[Any] | None = None

    def _transition(self, change: Transition) -> None:
        # MUTATION: accumulate; reported at the end of the attempt (in _notify)
        if self._net is None:
            self._net = [change[0], change[1]]
        else:
            self._net[1] = change[1]

    def _notify(self) -> None:
        net, self._net = self._net, None
        if net is not None and net[0] is not net[1] and not self._closed:
            self._on_health.emit(net[0], net[1])
        super()._notify()


provider = mutant_provider("cb003-transitions-coalesced-per-call", NetChangeMemory)
