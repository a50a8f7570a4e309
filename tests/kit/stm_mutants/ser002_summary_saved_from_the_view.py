"""SER-002 broken: ``to_dict()`` writes the summary the view shows, not the one installed.

The serializer takes ``summary`` from ``get_llm_context()``'s rendering. While DEGRADED or
RECOVERING the view shows recent turns only, so a degraded memory is saved with
``summary: ""``: restored, it looks the same today, but its recovery call is sent
``previous_summary=""`` and the summary it installs (and shows once HEALTHY) lacks
everything the lost one held, where the memory that was never saved and restored keeps
it. SER-002: ``from_dict(to_dict())`` "MUST be observably identical". HEALTHY and RETRY
states round-trip exactly.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-002"
COLLATERAL = {
    "WM-004": (
        "after a round trip while DEGRADED the recovery is sent previous_summary='' where the "
        "summary installed (the one a round trip must keep, SER-002) is another; the "
        "differential, which cannot see the summary a DEGRADED view hides, sees that call"
    ),
}


class ViewSummaryMemory(DefaultShortTermMemory):
    def to_dict(self) -> dict[str, Any]:
        state = super().to_dict()
        # MUTATION: the summary as the view has it (absent while degraded)
        state["summary"] = self._view().get("conversation_memory", {}).get("summary", "")
        return state


provider = mutant_provider("ser002-summary-saved-from-the-view", ViewSummaryMemory)
