"""WM-003 broken: installing a summary also removes pending turns that are the *same
object* as a turn the call was sent.

The install tracks what a call covered as a set of ``id(turn)``s besides the seq cut: a
caller that adds one ``ConversationTurn`` object twice (a retried request re-recording the
turn it holds, a canned "ok" reply reused) and sees the second copy evicted while the
call for the first runs, loses the second copy from pending when the summary is
installed, although the call never saw it. WM-003: installing "MUST remove from pending
exactly the turns sent to the call ...; turns evicted while the call ran MUST stay
pending". Distinct turn objects, equal or not, are handled as by the reference.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState

from . import mutant_provider
from ._util import own_memory_only

BREAKS = "WM-003"
COLLATERAL: dict[str, str] = {}

_install = watermark.install


def install(state: MemoryState, batch: watermark.Batch, summary: str) -> None:
    _install(state, batch, summary)
    if not batch.recovering:
        covered = {id(e.turn) for e in batch.entries}
        # MUTATION: pending copies of a covered turn object count as covered too
        state.pending = [e for e in state.pending if id(e.turn) not in covered]
        state.show_all_pending()  # the worker's settle recomputes the visible run anyway


provider = mutant_provider(
    "wm003-install-drops-copies-of-sent-turns", own_memory_only(watermark, "install", install)
)
