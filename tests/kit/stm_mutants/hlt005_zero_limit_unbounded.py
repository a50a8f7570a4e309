"""HLT-005 broken: ``recovery_backlog_limit=0`` means "no limit".

A common convention for limits: 0 disables the bound, so a memory configured to keep no
backlog at all keeps every evicted turn while DEGRADED and never counts a drop.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState

from . import mutant_provider
from ._util import own_memory_only

BREAKS = "HLT-005"
COLLATERAL: dict[str, str] = {}

_trim = watermark._trim_backlog  # the reference's


def _trim_backlog(state: MemoryState, limit: int) -> None:
    if limit == 0:
        return  # MUTATION: 0 means unlimited
    _trim(state, limit)


ZeroUnboundedMemory = own_memory_only(watermark, "_trim_backlog", _trim_backlog)

provider = mutant_provider("hlt005-zero-limit-unbounded", ZeroUnboundedMemory)
