"""WM-004 broken: a summary returned by a call that ``from_dict`` overtook is installed in
the loaded state when that state "is the same conversation".

A router that hydrates per request replaces the state while a call runs; to not waste the
call, the worker installs its summary in the loaded state when that state holds the same
summary the call was sent and its pending turns start with the very turn numbers the call
covered. The loaded state was not the one the call was made for (it may have been written
elsewhere, its turns merely numbered alike), and it changes under a call it never made.
WM-004: "A call in flight when ``from_dict`` replaces the state belongs to the replaced
state: its outcome (a summary or a failure) MUST NOT change the loaded one." Failed calls,
and loads of states that differ, are dropped as by the reference.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import WorkerChange, work

BREAKS = "WM-004"
COLLATERAL: dict[str, str] = {}


def _same_conversation(loaded: MemoryState, batch: watermark.Batch) -> bool:
    seqs = [e.seq for e in batch.entries]
    return (
        not batch.recovering
        and not loaded.health.degraded
        and loaded.summary == batch.previous_summary
        and [e.seq for e in loaded.pending[: len(seqs)]] == seqs
    )


class AdoptingMemory(DefaultShortTermMemory):
    async def _work(self) -> None:
        # MUTATION: the loaded state adopts the summary of a call made for the replaced one
        await work(self, WorkerChange(success_adopted=_same_conversation))


provider = mutant_provider("wm004-reloaded-state-adopts-call-outcome", AdoptingMemory)
