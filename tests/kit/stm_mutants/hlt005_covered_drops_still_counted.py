"""HLT-005 broken: turns dropped from the backlog while a recovery attempt holds them stay
counted as dropped after that attempt succeeds.

The recovery install takes the batch's turns off the backlog and installs the summary,
but ``dropped_turns`` is only ever increased: a turn dropped from the full backlog while
the attempt that was sent it was in flight is covered by that attempt's summary, yet
``to_dict()`` still counts it as lost. Everything else is the reference's.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState

from . import mutant_provider
from ._util import own_memory_only

BREAKS = "HLT-005"
COLLATERAL: dict[str, str] = {}

_original = watermark.install


def _install(state: MemoryState, batch: watermark.Batch, summary: str) -> None:
    dropped = state.dropped_turns
    _original(state, batch, summary)
    state.dropped_turns = dropped  # MUTATION: covered drops are not taken back


provider = mutant_provider(
    "hlt005-covered-drops-still-counted", own_memory_only(watermark, "install", _install)
)
