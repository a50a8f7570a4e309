"""HLT-006 broken: ``hydrate`` (the stepwise ``afrom_dict``) does not time the loaded state's
recovery from the load.

``from_dict`` restarts the retry/recovery timers as in the reference, but the async loader
``afrom_dict`` (what ``hydrate`` uses) was written separately and installs the loaded state
as parsed, whose timer is 0: a hydrated DEGRADED state attempts recovery at once, and a
worker that hydrates per request makes one attempt per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from reference_impl import schema
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-006"
COLLATERAL: dict[str, str] = {
    "HLT-002": "the same load path restarts no retry timer either: a RETRY state hydrated "
    "retries at once"
}


class HydrateNoTimerMemory(DefaultShortTermMemory):
    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        steps = schema.load_steps(state, self._config, self._budget, self._state.key)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                loaded = done.value
                break
            await asyncio.sleep(0)
        # MUTATION: no loaded.health.restart_timers(self._now())
        loaded.health.not_before = 0.0
        self._state = loaded
        self._notify()
        if self._config.strategy == "rolling_summary":
            self._wake()


provider = mutant_provider("hlt006-hydrate-skips-timer-restart", HydrateNoTimerMemory)
