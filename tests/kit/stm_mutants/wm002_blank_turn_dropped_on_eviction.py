"""WM-002 broken: under ``rolling_summary`` a blank turn evicted from recent is dropped, not
made pending.

A turn whose ``user_message`` and ``assistant_response`` are both ``""`` and that has no
digest is taken for "nothing to summarize": when the window evicts it, it leaves the memory
instead of joining pending. While it is recent it is shown as any turn.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.health import DEGRADED_STATES
from reference_impl.types import ShortTermMemoryConfig

from . import mutant_provider
from ._util import own_memory_only

BREAKS = "WM-002"
COLLATERAL: dict[str, str] = {}


def _blank(state: MemoryState) -> bool:
    turn = state.recent[0].turn
    return (
        turn.user_message == "" and turn.assistant_response == "" and turn.trajectory_digest is None
    )


def evict_oldest_recent(state: MemoryState, config: ShortTermMemoryConfig) -> None:
    if (
        config.strategy == "rolling_summary"
        and state.health.state not in DEGRADED_STATES
        and _blank(state)
    ):
        state.pop_recent()  # MUTATION: nothing to summarize
        return
    _original(state, config)


_original = watermark.evict_oldest_recent
BlankDroppedMemory = own_memory_only(watermark, "evict_oldest_recent", evict_oldest_recent)

provider = mutant_provider("wm002-blank-turn-dropped-on-eviction", BlankDroppedMemory)
