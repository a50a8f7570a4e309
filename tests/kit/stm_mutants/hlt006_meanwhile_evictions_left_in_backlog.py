"""HLT-006 broken: turns evicted while a recovery attempt ran stay in the backlog after it
succeeds.

The install of a recovery summary removes the batch's turns from the backlog but leaves the
newer ones there, instead of making them pending. Back in HEALTHY, the memory neither shows
nor summarizes a backlog: those turns are stranded (they reappear only if the memory
degrades again).
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState

from . import mutant_provider
from ._util import own_memory_only

BREAKS = "HLT-006"
COLLATERAL: dict[str, str] = {}


def install(state: MemoryState, batch: watermark.Batch, summary: str) -> None:
    if not batch.recovering:
        _original(state, batch, summary)
        return
    pending = list(state.pending)
    _original(state, batch, summary)
    newer = [e for e in state.pending if e not in pending]
    state.pending = pending
    state.backlog.extend(newer)  # MUTATION: left in the backlog, not made pending


_original = watermark.install
StrandedMemory = own_memory_only(watermark, "install", install)

provider = mutant_provider("hlt006-meanwhile-evictions-left-in-backlog", StrandedMemory)
