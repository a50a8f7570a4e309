"""Where turns go: recent -> pending -> covered by a summary (spec group WM).

Every turn gets a sequence number when it is added. Pending turns are ordered by it, a
summarizer call is sent a prefix of them, and a successful call removes exactly the turns
with ``seq <= through`` -- the turns it was sent -- so turns evicted while it ran stay
pending (WM-003). ``summarized_through`` is the watermark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .entries import Entry, MemoryState
from .health import DEGRADED_STATES
from .types import ShortTermMemoryConfig

__all__ = [
    "Batch",
    "admit",
    "degrade",
    "evict_oldest_recent",
    "install",
    "take_batch",
    "waiting",
]


@dataclass(frozen=True, slots=True)
class Batch:
    """The turns sent to one summarizer call."""

    entries: tuple[Entry, ...]
    previous_summary: str
    recovering: bool

    @property
    def through(self) -> int:
        return self.entries[-1].seq


def _to_backlog(state: MemoryState, entry: Entry, limit: int) -> None:
    state.backlog.append(entry)
    _trim_backlog(state, limit)


def _trim_backlog(state: MemoryState, limit: int) -> None:
    while len(state.backlog) > limit:
        # HLT-005: the one documented way a turn is lost without a summary; it is counted.
        _depart(state, state.backlog.popleft())
        state.dropped_turns += 1


def _depart(state: MemoryState, entry: Entry) -> None:
    """``entry`` leaves the memory's lists: remember its id (``MemoryState.departed``)."""
    turn_id = entry.turn.turn_id
    if turn_id is not None:
        state.departed.append(turn_id)


def evict_oldest_recent(state: MemoryState, config: ShortTermMemoryConfig) -> None:
    """Move the oldest recent turn out of the window, to wherever the strategy keeps it."""
    rolling = config.strategy == "rolling_summary"
    if rolling and state.health.state not in DEGRADED_STATES:
        state.recent_to_pending()  # the common case, in one call: every add_turn past the window
        return
    entry = state.pop_recent()
    if rolling:  # degraded
        _to_backlog(state, entry, config.recovery_backlog_limit)
    elif (turn_id := entry.turn.turn_id) is not None:
        # Truncation keeps no older turns (STR-002). _depart, inlined: every add_turn.
        state.departed.append(turn_id)


def admit(state: MemoryState, entry: Entry, config: ShortTermMemoryConfig) -> None:
    """Append a new turn to recent and evict beyond ``full_zone_turns`` (BUD-003, WM-002)."""
    state.push_recent(entry)
    state.next_seq = entry.seq + 1
    while len(state.recent) > config.budget.full_zone_turns:
        evict_oldest_recent(state, config)


def degrade(state: MemoryState, config: ShortTermMemoryConfig) -> None:
    """On entering DEGRADED, pending turns become backlog (HLT-004). Also what a loaded
    DEGRADED state goes through: a backlog saved under a larger limit is cut to this
    memory's, and the drops counted (HLT-005)."""
    state.backlog.extend(state.pending)
    _trim_backlog(state, config.recovery_backlog_limit)
    state.pending = []
    state.visible_from = 0
    state.visible_size = 0


def waiting(state: MemoryState) -> Sequence[Entry]:
    """The turns waiting for a summarizer call: pending, or the backlog when degraded."""
    return state.backlog if state.health.degraded else state.pending


def take_batch(state: MemoryState) -> Batch | None:
    """The turns the next summarizer call covers: all pending, or the backlog when degraded."""
    source = waiting(state)
    if not source:
        return None
    return Batch(tuple(source), state.summary, recovering=state.health.degraded)


def install(state: MemoryState, batch: Batch, summary: str) -> None:
    """Install a summary covering exactly the batch's turns (WM-003, HLT-006)."""
    through = batch.through
    state.set_summary(summary)
    state.summarized_through = through
    if batch.recovering:
        # Batch turns dropped from a full backlog while this call held them are covered by
        # its summary after all: they were not lost (and departed when dropped).
        covered = [e for e in state.backlog if e.seq <= through]
        for entry in covered:
            _depart(state, entry)
        state.dropped_turns -= len(batch.entries) - len(covered)
        # Turns evicted while recovering are newer than the batch: they become pending.
        remaining = [e for e in state.backlog if e.seq > through]
        state.backlog.clear()
        state.pending = remaining + state.pending
    else:
        cut = 0
        while cut < len(state.pending) and state.pending[cut].seq <= through:
            _depart(state, state.pending[cut])
            cut += 1
        del state.pending[:cut]
