"""CB-002 broken: the ``old`` of ``on_summary_updated`` is the summary the view showed when
the call started.

The worker notes ``old`` from ``get_llm_context()`` rather than from the state. While
DEGRADED/RECOVERING the view shows no summary, so the summary a recovery installs is
reported as ``("", new)`` although the memory held (and the call was sent) the last good one.
"""

from __future__ import annotations

from typing import Any

from reference_impl import watermark
from reference_impl.callbacks import CallbackQueue
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-002"
COLLATERAL: dict[str, str] = {}


class _OldFromView(CallbackQueue):
    def __init__(self, memory: OldFromViewMemory, callback: Any) -> None:
        super().__init__("on_summary_updated", callback)
        self._memory = memory

    def emit(self, *args: Any) -> None:
        super().emit(self._memory._old_visible, args[1])  # MUTATION


class OldFromViewMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._old_visible = ""
        self._on_summary = _OldFromView(self, self._config.on_summary_updated)

    async def _call(self, batch: watermark.Batch):
        self._old_visible = self._view()["conversation_memory"].get("summary", "")
        return await super()._call(batch)


provider = mutant_provider("cb002-old-summary-read-from-view", OldFromViewMemory)
