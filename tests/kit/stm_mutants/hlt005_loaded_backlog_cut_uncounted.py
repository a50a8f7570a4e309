"""HLT-005 broken: a loaded DEGRADED backlog over this memory's limit is cut silently.

``from_dict``/``hydrate`` of a DEGRADED state whose backlog is longer than this memory's
``recovery_backlog_limit`` (saved by a memory configured with a larger one) keeps the
newest ``limit`` turns, as it should, but does not add the turns it cut to
``dropped_turns``. The worker's degrade and every eviction count as the reference does.
Spec, HLT-005: "evicted turns MUST go to a backlog holding at most
``recovery_backlog_limit`` turns, dropping the oldest first; each drop MUST be counted
(``dropped_turns`` in ``to_dict()``)".
"""

from __future__ import annotations

from typing import Any

from reference_impl import watermark

from . import mutant_provider
from ._util import own_loads_only

BREAKS = "HLT-005"
COLLATERAL: dict[str, str] = {}

_degrade = watermark.degrade


def _degrade_uncounted(state: Any, config: Any) -> None:
    before = state.dropped_turns
    _degrade(state, config)
    state.dropped_turns = before  # MUTATION: turns cut from a loaded backlog not counted


provider = mutant_provider(
    "hlt005-loaded-backlog-cut-uncounted",
    own_loads_only(watermark, "degrade", _degrade_uncounted),
)
