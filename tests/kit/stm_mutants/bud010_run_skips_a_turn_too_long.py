"""BUD-010 broken: the visible pending run skips a pending turn too long to show and goes
on with older ones.

Under ``rolling_summary`` with a token limit, a pending turn that alone is longer than
the whole limit is left out of the view, and the older pending turns that fit are shown,
newest first, as if it were not there; it stays pending and reaches the summarizer. The
spec's run is of the *newest* pending turns: it ends at the first turn that does not fit.
A turn lost instead (``wm002_turn_too_long_to_show_dropped``) shows the same view; which
requirement broke is told by what the summarizer receives.
"""

from __future__ import annotations

from typing import Any

from reference_impl.entries import Entry
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.tokens import canonical_json
from reference_impl.types import MemoryHealth, default_token_estimator

from . import mutant_provider

BREAKS = "BUD-010"
COLLATERAL: dict[str, str] = {}


class SkipsTooLongMemory(DefaultShortTermMemory):
    def _too_long(self, entry: Entry) -> bool:
        limit = self._config.budget.total_max_tokens
        turn = entry.turn
        # The default estimator counts about four characters a token.
        return len(turn.user_message) + len(turn.assistant_response) > 4 * limit

    def _count(self, view: dict[str, Any]) -> int:
        estimator = self._config.token_estimator or default_token_estimator
        return estimator(canonical_json(view))

    def _view(self) -> dict[str, Any]:
        view = super()._view()
        state = self._state
        if (
            self._config.strategy != "rolling_summary"
            or not self._config.budget.total_max_tokens
            or state.health.state is not MemoryHealth.HEALTHY
            or not any(self._too_long(entry) for entry in state.pending)
        ):
            return view
        # MUTATION: the run goes on past a turn too long to show, with older ones that fit.
        inner = dict(view["conversation_memory"])
        inner.pop("pending_turns", None)
        shown: list[dict[str, Any]] = []
        for entry in reversed(state.pending):
            if self._too_long(entry):
                continue
            trial = {**inner, "pending_turns": [entry.fresh(), *shown]}
            if self._count({"conversation_memory": trial}) > self._config.budget.total_max_tokens:
                break
            shown = trial["pending_turns"]
        if shown:
            inner["pending_turns"] = shown
        return {"conversation_memory": inner}

    def estimate_tokens(self) -> int:
        return self._count(self._view())


provider = mutant_provider("bud010-run-skips-a-turn-too-long", SkipsTooLongMemory)
