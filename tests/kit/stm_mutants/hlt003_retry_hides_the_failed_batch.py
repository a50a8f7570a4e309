"""HLT-003 broken: in RETRY the view hides the pending turns of the failed call.

The turns sent to a call that failed are taken to be "with the summarizer" until the retry
succeeds: in RETRY, ``pending_turns`` shows only turns evicted after that call was sent.
The summary, recent turns and every other state are shown as in the reference;
``estimate_tokens()`` measures the view shown.
"""

from __future__ import annotations

from typing import Any

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.tokens import canonical_json
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-003"
COLLATERAL: dict[str, str] = {}


class RetryHidesBatchMemory(DefaultShortTermMemory):
    _sent_through = 0

    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        self._sent_through = batch.through
        return await super()._call(batch)

    def _view(self) -> dict[str, Any]:
        view = super()._view()
        if self._state.health.state is MemoryHealth.RETRY:
            inner = view["conversation_memory"]
            shown = [
                rendered
                for entry, rendered in zip(
                    self._state.visible_pending, inner.get("pending_turns", []), strict=True
                )
                if entry.seq > self._sent_through  # MUTATION
            ]
            if shown:
                inner["pending_turns"] = shown
            else:
                inner.pop("pending_turns", None)
        return view

    def estimate_tokens(self) -> int:
        if self._state.health.state is MemoryHealth.RETRY:
            return self._budget.meter.estimator(canonical_json(self._view()))
        return super().estimate_tokens()


provider = mutant_provider("hlt003-retry-hides-the-failed-batch", RetryHidesBatchMemory)
