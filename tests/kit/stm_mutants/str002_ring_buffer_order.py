"""STR-002 broken: once the truncation window wraps, its turns are shown in slot order.

The window is read as a ring buffer of ``full_zone_turns`` slots, turn ``seq`` in slot
``(seq - 1) % full_zone_turns``, from slot 0 up instead of from the oldest turn. The right
turns are shown, oldest first while the window has not wrapped, out of order once more
turns were added than it holds.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "STR-002"
COLLATERAL: dict[str, str] = {}


class RingOrderMemory(DefaultShortTermMemory):
    def _view(self) -> dict[str, Any]:
        view = super()._view()
        window = self._config.budget.full_zone_turns
        if self._config.strategy == "truncation" and window:
            inner = view["conversation_memory"]
            slotted = zip(self._state.recent, inner["recent_turns"], strict=True)
            # MUTATION: ordered by ring-buffer slot, not by age
            ordered = sorted(slotted, key=lambda pair: (pair[0].seq - 1) % window)
            inner["recent_turns"] = [rendered for _, rendered in ordered]
        return view


provider = mutant_provider("str002-ring-buffer-order", RingOrderMemory)
