"""WM-005 broken: pending turns are listed in text order of their sequence numbers.

The view looks the visible pending turns up by their sequence number kept as a string key
(as in a JSON object) and lists them in sorted key order, so ``"10"`` comes before ``"9"``:
pending turns are oldest first until they straddle a power of ten. Summarizer calls are
still sent the turns in order.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-005"
COLLATERAL: dict[str, str] = {}


class TextOrderPendingMemory(DefaultShortTermMemory):
    def _view(self) -> dict[str, Any]:
        view = super()._view()
        inner = view.get("conversation_memory", {})
        if "pending_turns" in inner:
            visible = self._state.visible_pending
            by_seq = {str(e.seq): r for e, r in zip(visible, inner["pending_turns"], strict=True)}
            # MUTATION: string keys sorted as text, not as numbers
            inner["pending_turns"] = [by_seq[seq] for seq in sorted(by_seq)]
        return view


provider = mutant_provider("wm005-pending-sorted-as-text", TextOrderPendingMemory)
