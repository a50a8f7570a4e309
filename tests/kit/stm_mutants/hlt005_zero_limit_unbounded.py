"""HLT-005 broken: ``recovery_backlog_limit=0`` means "no limit".

A common convention for limits: 0 disables the bound, so a memory configured to keep no
backlog at all keeps every evicted turn while DEGRADED and never counts a drop.
"""

from __future__ import annotations

import contextvars
from typing import Any

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-005"
COLLATERAL: dict[str, str] = {}

_original_trim = watermark._trim_backlog
#: Set while this mutant's memory works: the patch below is inert for every other memory
#: of a process that imports this module (the meta-tests import every mutant).
_mutated: contextvars.ContextVar[bool] = contextvars.ContextVar("zero_unbounded", default=False)


def _trim_backlog(state: MemoryState, limit: int) -> None:
    if limit == 0 and _mutated.get():
        return  # MUTATION: 0 means unlimited
    _original_trim(state, limit)


watermark._trim_backlog = _trim_backlog


class ZeroUnboundedMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: Any) -> None:
        # The summarizer worker this starts inherits the context, and with it the mutation.
        token = _mutated.set(True)
        try:
            await super().add_turn(turn)
        finally:
            _mutated.reset(token)


provider = mutant_provider("hlt005-zero-limit-unbounded", ZeroUnboundedMemory)
