"""WM-002 broken: a turn evicted while the summarizer is in RETRY goes to the backlog.

The eviction tests ``health is HEALTHY`` rather than ``health is not DEGRADED or
RECOVERING``: in RETRY an evicted turn is put in the hidden backlog instead of pending, so
it is neither shown nor sent with the retry; only a later degrade or recovery picks it up.
The turns pending when the call failed stay pending (HLT-003 holds).
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.types import MemoryHealth, ShortTermMemoryConfig

from . import mutant_provider
from ._util import own_memory_only

BREAKS = "WM-002"
COLLATERAL = {
    "WM-004": "a turn evicted in RETRY waits in the backlog, which only a recovery sends: when "
    "the retry succeeds instead, newer turns are summarized before it, or it never is (whether "
    "a check's turn is evicted in RETRY depends on when its retry runs)",
}


def evict_oldest_recent(state: MemoryState, config: ShortTermMemoryConfig) -> None:
    rolling = config.strategy == "rolling_summary"
    if rolling and state.health.state is MemoryHealth.HEALTHY:  # MUTATION: RETRY falls through
        state.recent_to_pending()
        return
    entry = state.pop_recent()
    if rolling:
        watermark._to_backlog(state, entry, config.recovery_backlog_limit)
    elif (turn_id := entry.turn.turn_id) is not None:
        state.departed.append(turn_id)


RetryToBacklogMemory = own_memory_only(watermark, "evict_oldest_recent", evict_oldest_recent)

provider = mutant_provider("wm002-retry-evictions-to-backlog", RetryToBacklogMemory)
