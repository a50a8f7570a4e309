"""KEY-001 broken: a process-wide cache of summaries, keyed without the tenant, seeds new memories.

To resume a session whose memory object was evicted from a router's cache, the backend
remembers the last summary it installed per ``(user_id, session_id)`` and gives it to
the next memory made for that session. The cache key forgets the tenant: once tenant A has
a summary, a new memory of tenant B with the same user and session ids starts with it,
shows it and sends it as ``previous_summary``. Memories made before that are not affected.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "KEY-001"
COLLATERAL: dict[str, str] = {}

_LAST: dict[tuple[str, str], str] = {}


class SeededMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        key = self._state.key
        if key is not None and self._config.strategy == "rolling_summary":
            seed = _LAST.get((key.user_id, key.session_id))  # MUTATION: no tenant_id
            if seed and self._budget.summary_fits(seed):
                self._state.set_summary(seed)
                self._budget.settle(self._state)

    def _reject_summary(self, state: Any, batch: Any, summary: str) -> Any:
        error = super()._reject_summary(state, batch, summary)
        key = state.key
        if error is None and key is not None:
            _LAST[(key.user_id, key.session_id)] = summary
        return error


provider = mutant_provider("key001-summary-cache-without-tenant", SeededMemory)
