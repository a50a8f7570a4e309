"""HLT-005 broken: degrading keeps the *oldest* pending turns within the backlog limit.

When the last retry fails, the pending turns move to the backlog with a slice taken from
the wrong end, ``pending[:limit]``: the oldest ``recovery_backlog_limit`` turns are kept
and the newest dropped. The drops are counted, and turns evicted later while DEGRADED
are handled as the reference does (oldest dropped first). The recovery then summarizes
the stalest turns and loses the ones closest to the recent window. Spec, HLT-005: "a
backlog holding at most ``recovery_backlog_limit`` turns, dropping the oldest first".
"""

from __future__ import annotations

from typing import Any

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import _on, _switch

BREAKS = "HLT-005"
COLLATERAL: dict[str, str] = {}


def _degrade_keeping_oldest(state: Any, config: Any) -> None:
    limit = config.recovery_backlog_limit
    moved = list(state.pending)
    for entry in moved[limit:]:  # MUTATION: the newest pending turns are the ones dropped
        watermark._depart(state, entry)
        state.dropped_turns += 1
    state.backlog.extend(moved[:limit])
    watermark._trim_backlog(state, limit)
    state.pending = []
    state.visible_from = 0
    state.visible_size = 0


_active = _switch(watermark, "degrade", _degrade_keeping_oldest)


class OldestKeptMemory(DefaultShortTermMemory):
    async def _work(self) -> None:  # the worker's degrade only; loads are the reference's
        with _on(_active):
            await super()._work()


provider = mutant_provider("hlt005-degrade-keeps-oldest-pending", OldestKeptMemory)
