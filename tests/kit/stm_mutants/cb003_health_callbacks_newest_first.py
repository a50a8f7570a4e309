"""CB-003 broken: health changes queued behind a slow callback are reported newest first.

The queue of ``on_health_changed`` events is drained from the wrong end (``pop`` where
``popleft`` is meant). With a quick callback nothing queues and the order is right; behind
a slow one, the transitions are reported out of order, and since the newest keeps being
taken first, the ones before it may never be reported while new ones keep coming.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-003"
COLLATERAL: dict[str, str] = {}


class _NewestFirst(deque[tuple[Any, ...]]):
    def popleft(self) -> tuple[Any, ...]:
        return self.pop()  # MUTATION: the newest event first


class NewestFirstHealthMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_health._events = _NewestFirst()


provider = mutant_provider("cb003-health-callbacks-newest-first", NewestFirstHealthMemory)
