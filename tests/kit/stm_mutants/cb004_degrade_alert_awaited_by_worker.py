"""CB-004 broken: entering DEGRADED is reported by awaiting ``on_health_changed`` in the worker.

"An operator must hear of a degraded memory before it drops its pending turns": the
DEGRADED transition is delivered inline, awaited by the summarizer worker before it records
the outcome, while other transitions go through the fire-and-forget queue. A slow
``on_health_changed`` then delays the degrade itself and every ``flush()`` waiting for it; a
raising one crashes the worker.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import Health, WorkerChange, work

BREAKS = "CB-004"
COLLATERAL: dict[str, str] = {}


async def _alert(memory: DefaultShortTermMemory, change: Health) -> None:
    callback = memory._config.on_health_changed
    if callback is not None:
        await callback(*change)  # MUTATION: the alert is awaited inline, before degrading


class InlineAlertMemory(DefaultShortTermMemory):
    async def _work(self) -> None:
        await work(self, WorkerChange(degrade_alert=_alert))


provider = mutant_provider("cb004-degrade-alert-awaited-by-worker", InlineAlertMemory)
