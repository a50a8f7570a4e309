"""WM-002 broken: under ``rolling_summary`` with a token limit, a turn evicted from recent
that alone is longer than the whole limit is dropped, not made pending.

Such a turn could never be shown as pending (BUD-010 hides every pending turn older than
the newest that does not fit), so dropping it changes no view until a summary is due: the
turn never reaches the summarizer.
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


def _too_long(state: MemoryState, config: ShortTermMemoryConfig) -> bool:
    limit = config.budget.total_max_tokens
    turn = state.recent[0].turn
    # The default estimator counts about four characters a token.
    return bool(limit) and len(turn.user_message) + len(turn.assistant_response) > 4 * limit


def evict_oldest_recent(state: MemoryState, config: ShortTermMemoryConfig) -> None:
    if (
        config.strategy == "rolling_summary"
        and state.health.state not in DEGRADED_STATES
        and _too_long(state, config)
    ):
        state.pop_recent()  # MUTATION: it could never be shown anyway
        return
    _original(state, config)


_original = watermark.evict_oldest_recent
TooLongDroppedMemory = own_memory_only(watermark, "evict_oldest_recent", evict_oldest_recent)

provider = mutant_provider("wm002-turn-too-long-to-show-dropped", TooLongDroppedMemory)
