"""HLT-005 broken: ``dropped_turns`` is treated as a per-process statistic: a load resets it.

``to_dict()`` writes the count, but ``from_dict``/``hydrate`` start counting afresh, so the
turns a DEGRADED memory lost before a restore no longer show in ``to_dict()`` after it.
"""

from __future__ import annotations

from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-005"
COLLATERAL: dict[str, str] = {}


class ForgetfulDropsMemory(DefaultShortTermMemory):
    def _install(self, loaded: MemoryState) -> None:
        loaded.dropped_turns = 0  # MUTATION: the count of lost turns does not survive a load
        super()._install(loaded)


provider = mutant_provider("hlt005-drop-count-reset-on-load", ForgetfulDropsMemory)
