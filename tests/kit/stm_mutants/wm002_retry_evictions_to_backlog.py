"""WM-002 broken: a turn evicted while the summarizer is in RETRY goes to the backlog.

The eviction tests ``health is HEALTHY`` rather than ``health is not DEGRADED or
RECOVERING``: in RETRY an evicted turn is put in the hidden backlog instead of pending, so
it is neither shown nor sent with the retry; only a later degrade or recovery picks it up.
The turns pending when the call failed stay pending (HLT-003 holds).
"""

from __future__ import annotations

import contextvars

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn, MemoryHealth, ShortTermMemoryConfig

from . import mutant_provider

BREAKS = "WM-002"
COLLATERAL = {
    "WM-004": "a turn evicted in RETRY waits in the backlog, which only a recovery sends: when "
    "the retry succeeds instead, newer turns are summarized before it, or it never is (whether "
    "a check's turn is evicted in RETRY depends on when its retry runs)",
}

_original_evict = watermark.evict_oldest_recent
#: Set while this mutant's memory works: the patch below is inert for every other memory
#: of a process that imports this module (the meta-tests import every mutant).
_mutated: contextvars.ContextVar[bool] = contextvars.ContextVar("retry_to_backlog", default=False)


def evict_oldest_recent(state: MemoryState, config: ShortTermMemoryConfig) -> None:
    if not _mutated.get():
        _original_evict(state, config)
        return
    rolling = config.strategy == "rolling_summary"
    if rolling and state.health.state is MemoryHealth.HEALTHY:  # MUTATION: RETRY falls through
        state.recent_to_pending()
        return
    entry = state.pop_recent()
    if rolling:
        watermark._to_backlog(state, entry, config.recovery_backlog_limit)
    elif (turn_id := entry.turn.turn_id) is not None:
        state.departed.append(turn_id)


watermark.evict_oldest_recent = evict_oldest_recent


class RetryToBacklogMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        # The summarizer worker this starts inherits the context, and with it the mutation.
        token = _mutated.set(True)
        try:
            await super().add_turn(turn)
        finally:
            _mutated.reset(token)


provider = mutant_provider("wm002-retry-evictions-to-backlog", RetryToBacklogMemory)
