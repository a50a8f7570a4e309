"""HLT-005 broken: with ``recovery_backlog_limit=0`` the backlog still keeps one turn.

A turn evicted while DEGRADED is put in the backlog "making room first": the oldest turns
are dropped (and counted) while the backlog is full, then the new turn is appended. For
any limit of one or more that keeps exactly ``limit`` turns, but with a limit of 0 there
is nothing to make room from, and every evicted turn sits in the backlog until the next
one replaces it: the backlog holds one turn more than the limit. Trims of a backlog that
grew otherwise (degrading, loading) are the reference's.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState

from . import mutant_provider
from ._util import own_memory_only

BREAKS = "HLT-005"
COLLATERAL: dict[str, str] = {}


def _to_backlog(state: MemoryState, entry: watermark.Entry, limit: int) -> None:
    # MUTATION: room is made before the append, never after it
    while state.backlog and len(state.backlog) >= limit:
        watermark._depart(state, state.backlog.popleft())
        state.dropped_turns += 1
    state.backlog.append(entry)


provider = mutant_provider(
    "hlt005-room-made-before-append", own_memory_only(watermark, "_to_backlog", _to_backlog)
)
