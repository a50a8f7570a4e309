"""WM-007 broken: ``flush()`` follows a ``from_dict`` made while it waits, but keeps the
turn number it waited for in the replaced state and compares it with the loaded state's
watermark: a loaded state numbered higher makes it return at once with its turns pending
(one numbered lower makes it wait for turns not yet added).
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-007"
COLLATERAL: dict[str, str] = {}


class Memory(DefaultShortTermMemory):
    async def flush(self) -> None:
        if self._config.strategy != "rolling_summary" or self._closed:
            return
        state = self._state
        if not state.pending:
            return
        target = state.pending[-1].seq
        self._wake()
        while not self._closed:
            state = self._state  # MUTATION: the loaded state, with the old target
            if state.summarized_through >= target or state.health.degraded:
                return
            if self._crash is not None:
                raise RuntimeError("the summarizer worker crashed") from self._crash
            await self._changed.wait()


provider = mutant_provider("wm007-target-kept-across-from-dict", Memory)
