"""HLT-005 broken: a successful recovery resets ``dropped_turns`` to 0.

"Recovered: nothing is lost any more." The count of turns dropped from the full DEGRADED
backlog is cleared when a recovery attempt succeeds, although only the dropped turns that
attempt was sent (and so covers) stop counting; turns dropped before the backlog the
attempt took are lost for good and vanish from ``to_dict()``. HLT-005: "each drop MUST be
counted (``dropped_turns`` in ``to_dict()``)", and only "a turn dropped while a recovery
attempt that was sent it is in flight ... is then no longer counted as dropped".
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState

from . import mutant_provider
from ._util import own_memory_only

BREAKS = "HLT-005"
COLLATERAL: dict[str, str] = {}

_install = watermark.install


def install(state: MemoryState, batch: watermark.Batch, summary: str) -> None:
    _install(state, batch, summary)
    if batch.recovering:
        state.dropped_turns = 0  # MUTATION: a recovery forgets every drop


provider = mutant_provider(
    "hlt005-recovery-resets-drop-count", own_memory_only(watermark, "install", install)
)
