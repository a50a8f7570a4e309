"""WM-005 broken: when the budget hides some pending turns, the visible ones are rendered
newest first.

The visible run is collected from the newest pending turn backwards (to see how many fit)
and, in that one path, never reversed: with at least one pending turn hidden, the view's
``pending_turns`` are newest first. With every pending turn shown, the order is right.
Lengths are unchanged, so ``estimate_tokens()`` still measures the view.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-005"
COLLATERAL: dict[str, str] = {}


class ReversedTrimmedPendingMemory(DefaultShortTermMemory):
    def _view(self) -> dict[str, Any]:
        view = super()._view()
        inner = view.get("conversation_memory", {})
        if self._state.visible_from > 0 and "pending_turns" in inner:
            inner["pending_turns"].reverse()  # MUTATION
        return view


provider = mutant_provider(
    "wm005-trimmed-pending-rendered-newest-first", ReversedTrimmedPendingMemory
)
