"""STR-001 broken: a ``none`` memory stores every turn it is given, it only never shows it.

Strategy ``none`` is implemented as "truncation with the view switched off": ``add_turn``
admits the turn to the recent window (evicting beyond ``full_zone_turns`` as truncation
does) and bumps the change count, while ``get_llm_context()`` is ``{}`` and
``estimate_tokens()`` the estimator on ``"{}"``. The turns are held in memory and written
by ``to_dict()``/``persist``: the memory is not a no-op ("add_turn stores nothing"), and its
own saved state is one the spec calls malformed for ``none`` (SER-003).
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import Entry
from reference_impl.inputs import check_turn
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "STR-001"
COLLATERAL: dict[str, str] = {}


class NoneKeepsTurnsMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        if self._config.strategy != "none":
            await super().add_turn(turn)
            return
        if self._closed:
            raise RuntimeError("add_turn on a closed memory")
        check_turn(turn)
        state = self._state
        entry = Entry.make(
            state.next_seq,
            turn,
            include_digest=self._config.include_trajectory_digest,
            size_of=self._size_of if state.metered else None,
        )
        # MUTATION: the turn is stored (recent window), only the view hides it
        watermark.admit(state, entry, self._config)
        self._changes += 1


provider = mutant_provider("str001-none-keeps-turns-in-state", NoneKeepsTurnsMemory)
