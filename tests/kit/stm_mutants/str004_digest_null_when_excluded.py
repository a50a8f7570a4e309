"""STR-004 broken: with ``include_trajectory_digest=False`` turns render
``"trajectory_digest": null``.

The rendered turn is a fixed-shape record whose digest field is "switched off" by setting
it to ``None`` rather than by leaving it out. A turn must render as ``{"user",
"assistant"}`` alone when digests are not included: the ``null`` key changes what the model
reads and what every token count measures. With digests included, turns render as the
reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reference_impl import watermark
from reference_impl.entries import Entry, render_turn
from reference_impl.inputs import check_turn
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.tokens import canonical_json
from reference_impl.types import ConversationTurn, MemoryBudgetExceeded

from . import mutant_provider

BREAKS = "STR-004"
COLLATERAL: dict[str, str] = {}


def _entry(seq: int, turn: ConversationTurn, size_of: Callable[[str], int]) -> Entry:
    rendered: dict[str, Any] = render_turn(turn, include_digest=False)
    rendered["trajectory_digest"] = None  # MUTATION: switched off as null, not left out
    fragment = canonical_json(rendered)
    return Entry(seq, turn, rendered, rendered.copy, fragment, size_of(fragment))


class NullDigestMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        cfg = self._config
        if self._closed or cfg.strategy == "none" or cfg.include_trajectory_digest:
            await super().add_turn(turn)
            return
        check_turn(turn)
        state = self._state
        entry = _entry(state.next_seq, turn, self._size_of)
        if cfg.budget.overflow_policy == "error" and not self._budget.fits_after_add(state, entry):
            raise MemoryBudgetExceeded("turn would take the memory over total_max_tokens")
        watermark.admit(state, entry, cfg)
        self._budget.enforce(state)
        self._on_turn.emit(turn)
        if cfg.strategy == "rolling_summary":
            self._wake()


provider = mutant_provider("str004-digest-null-when-excluded", NullDigestMemory)
