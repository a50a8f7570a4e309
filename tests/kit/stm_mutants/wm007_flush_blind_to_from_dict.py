"""WM-007 broken: ``flush()`` waits on the state it started with and never notices ``from_dict``.

The loop waits for the watermark of the state object current when ``flush()`` was called.
A ``from_dict`` during the flush replaces that object: the loaded state's calls cover the
turns, but the old object's watermark never moves, so ``flush()`` never returns.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-007"
COLLATERAL: dict[str, str] = {}


class BlindFlushMemory(DefaultShortTermMemory):
    async def flush(self) -> None:
        if self._config.strategy != "rolling_summary" or self._closed:
            return
        state = self._state
        if not state.pending:
            return
        target = state.pending[-1].seq
        self._wake()
        # MUTATION: no `self._state is state` test
        while not self._closed and state.summarized_through < target and not state.health.degraded:
            if self._crash is not None:
                raise RuntimeError("the summarizer worker crashed") from self._crash
            await self._changed.wait()


provider = mutant_provider("wm007-flush-blind-to-from-dict", BlindFlushMemory)
