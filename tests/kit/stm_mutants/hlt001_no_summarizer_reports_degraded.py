"""HLT-001 broken: a memory without a summarizer (``truncation``, ``none``) reports
DEGRADED from the start.

Taking "no summarizer" for "summarizer unavailable", the ``health`` property of a
``truncation`` or ``none`` memory is ``MemoryHealth.DEGRADED``. Its state (and
``to_dict()``) still record ``healthy``; ``rolling_summary`` memories are unchanged.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-001"
COLLATERAL: dict[str, str] = {}


class NoSummarizerDegradedMemory(DefaultShortTermMemory):
    @property
    def health(self) -> MemoryHealth:
        if self._config.strategy != "rolling_summary":
            return MemoryHealth.DEGRADED  # MUTATION
        return self._state.health.state


provider = mutant_provider("hlt001-no-summarizer-reports-degraded", NoSummarizerDegradedMemory)
