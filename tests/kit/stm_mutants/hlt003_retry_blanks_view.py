"""HLT-003 broken: in RETRY the view drops the summary and the pending turns.

While a failed call waits for its retry, the memory shows recent turns only, as if it were
DEGRADED.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-003"
COLLATERAL = {
    "BUD-008": (
        "estimate_tokens() still counts the pending turns and summary the blanked view leaves out"
    ),
}


class BlankInRetryMemory(DefaultShortTermMemory):
    def _view(self) -> dict[str, Any]:
        view = super()._view()
        if self.health is MemoryHealth.RETRY:
            inner = view["conversation_memory"]
            # MUTATION: RETRY treated like DEGRADED
            return {"conversation_memory": {"recent_turns": inner["recent_turns"]}}
        return view


provider = mutant_provider("hlt003-retry-blanks-view", BlankInRetryMemory)
