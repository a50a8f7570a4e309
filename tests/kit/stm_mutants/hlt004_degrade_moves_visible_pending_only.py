"""HLT-004 broken: on degrading, only the *visible* pending turns move to the backlog.

``watermark.degrade`` extends the backlog with ``pending[visible_from:]``: the pending turns
the budget hides (BUD-004/BUD-010: hidden, not deleted) are thrown away when the memory
degrades, without a summary and without being counted as dropped. With no budget, or
with every pending turn visible, nothing changes. HLT-004: on becoming DEGRADED "pending
turns move to the backlog"; the lost turns also break WM-006 ("No turn may be discarded
without a summary covering it, except on the DEGRADED backlog overflow path").
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.types import ShortTermMemoryConfig

from . import mutant_provider
from ._util import own_memory_only

BREAKS = "HLT-004"
COLLATERAL = {
    "WM-006": "the hidden pending turns are discarded uncovered and uncounted, not on the "
    "backlog overflow path",
}

_trim_backlog = watermark._trim_backlog


def degrade(state: MemoryState, config: ShortTermMemoryConfig) -> None:
    state.backlog.extend(state.pending[state.visible_from :])  # MUTATION: visible ones only
    _trim_backlog(state, config.recovery_backlog_limit)
    state.pending = []
    state.visible_from = 0
    state.visible_size = 0


provider = mutant_provider(
    "hlt004-degrade-moves-visible-pending-only", own_memory_only(watermark, "degrade", degrade)
)
