"""WM-003 broken: installing a summary removes the pending turns *equal* to a turn sent to
the call (``turn in sent``, dataclass equality), not the turns sent. A turn evicted while
the call ran that repeats a sent one ("ok" / "ok", same ts) is removed with it.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState

from . import mutant_provider
from ._util import own_memory_only

BREAKS = "WM-003"
COLLATERAL: dict[str, str] = {}


def install(state: MemoryState, batch: watermark.Batch, summary: str) -> None:
    if batch.recovering:
        return _original(state, batch, summary)
    state.set_summary(summary)
    state.summarized_through = batch.through
    sent = [e.turn for e in batch.entries]
    kept = []
    for entry in state.pending:
        if entry.turn in sent:  # MUTATION: equality, not the entries sent
            watermark._depart(state, entry)
        else:
            kept.append(entry)
    state.pending = kept
    state.show_all_pending()


_original = watermark.install
Memory = own_memory_only(watermark, "install", install)
provider = mutant_provider("wm003-install-matches-turns-by-equality", Memory)
