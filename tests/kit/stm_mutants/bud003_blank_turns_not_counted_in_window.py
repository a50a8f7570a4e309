"""BUD-003 broken: blank turns do not count toward the recent window.

The window is meant to hold ``full_zone_turns`` "real" exchanges, so a turn whose user
message and answer are both empty or whitespace (and that has no digest) is not counted:
eviction runs while the number of non-blank recent turns exceeds the window. Recent then
holds more than ``full_zone_turns`` turns whenever blank turns are among them (truncation
and rolling_summary alike). Without blank turns the window is the reference's.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import Entry, MemoryState
from reference_impl.types import ShortTermMemoryConfig

from . import mutant_provider
from ._util import own_memory_only

BREAKS = "BUD-003"
COLLATERAL: dict[str, str] = {}


def _blank(entry: Entry) -> bool:
    t = entry.turn
    return (
        t.trajectory_digest is None
        and not t.user_message.strip()
        and not t.assistant_response.strip()
    )


def _admit(state: MemoryState, entry: Entry, config: ShortTermMemoryConfig) -> None:
    state.push_recent(entry)
    state.next_seq = entry.seq + 1
    # MUTATION: only non-blank turns count toward the window
    while state.recent and sum(not _blank(e) for e in state.recent) > config.budget.full_zone_turns:
        watermark.evict_oldest_recent(state, config)


provider = mutant_provider(
    "bud003-blank-turns-not-counted-in-window", own_memory_only(watermark, "admit", _admit)
)
