"""WM-004 broken: a summary returned by a call that ``from_dict`` overtook is installed in
the loaded state when that state "is the same conversation".

A router that hydrates per request replaces the state while a call runs; to not waste the
call, the worker installs its summary in the loaded state when that state holds the same
summary the call was sent and its pending turns start with the very turn numbers the call
covered. The loaded state was not the one the call was made for (it may have been written
elsewhere, its turns merely numbered alike), and it changes under a call it never made.
WM-004: "A call in flight when ``from_dict`` replaces the state belongs to the replaced
state: its outcome (a summary or a failure) MUST NOT change the loaded one." Failed calls,
and loads of states that differ, are dropped as by the reference.
"""

from __future__ import annotations

import asyncio

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, logger
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "WM-004"
COLLATERAL: dict[str, str] = {}


def _same_conversation(loaded: object, batch: watermark.Batch) -> bool:
    seqs = [e.seq for e in batch.entries]
    return (
        not batch.recovering
        and not loaded.health.degraded  # type: ignore[attr-defined]
        and loaded.summary == batch.previous_summary  # type: ignore[attr-defined]
        and [e.seq for e in loaded.pending[: len(seqs)]] == seqs  # type: ignore[attr-defined]
    )


class AdoptingMemory(DefaultShortTermMemory):
    async def _work(self) -> None:
        while not self._closed:
            state = self._state
            batch = watermark.take_batch(state)
            if batch is None:
                return
            delay = state.health.wait_s(self._now())
            if delay > 0:
                await self._sleep(delay)
                continue
            if state.health.state is MemoryHealth.DEGRADED:
                self._transition(state.health.begin_recovery(self._now()))
            summary, error = await self._call(batch)
            if self._state is not state:
                if error is not None or not _same_conversation(self._state, batch):
                    continue
                state = self._state  # MUTATION: the loaded state adopts the call's summary
            if error is None:
                assert summary is not None
                error = self._reject_summary(state, batch, summary)
            if error is None:
                assert summary is not None
                old = state.summary
                watermark.install(state, batch, summary)
                self._transition(state.health.on_success())
                self._on_summary.emit(old, summary)
            else:
                logger.warning("summarizer call failed: %s", error)
                change = state.health.on_failure(self._now())
                if change[1] is MemoryHealth.DEGRADED and change[0] is not MemoryHealth.RECOVERING:
                    watermark.degrade(state, self._config)
                self._transition(change)
            try:
                self._budget.settle(state)
            except Exception:
                logger.exception("token_estimator raised bringing the view within budget")
            self._notify()
            await asyncio.sleep(0)


provider = mutant_provider("wm004-reloaded-state-adopts-call-outcome", AdoptingMemory)
