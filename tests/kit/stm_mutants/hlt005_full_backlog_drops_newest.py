"""HLT-005 broken: a full DEGRADED backlog drops its newest turn instead of its oldest.

The backlog is a deque whose overflow is trimmed from the wrong end: the turn just
evicted is the one dropped (and counted), so once ``recovery_backlog_limit`` turns wait,
the backlog keeps the stalest turns and recovery summarizes those, losing the ones closest
to the recent window. The count of dropped turns is right.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from reference_impl.entries import Entry
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-005"
COLLATERAL: dict[str, str] = {}


class NewestFirstOutBacklog(deque[Entry]):
    def popleft(self) -> Entry:
        return self.pop()  # MUTATION: the overflow is trimmed at the newest end


class NewestDroppedMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._state.backlog = NewestFirstOutBacklog(self._state.backlog)

    def from_dict(self, state: Mapping[str, Any]) -> None:
        super().from_dict(state)
        self._state.backlog = NewestFirstOutBacklog(self._state.backlog)


provider = mutant_provider("hlt005-full-backlog-drops-newest", NewestDroppedMemory)
