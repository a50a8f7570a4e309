"""HLT-004 broken: the memory never leaves RETRY, however many retries fail.

The health machine is given an unlimited retry budget, so the memory never becomes
DEGRADED and its pending turns never move to the backlog.
"""

from __future__ import annotations

import sys
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

SLOW = "each check that waits for DEGRADED waits its whole patience"
BREAKS = "HLT-004"
COLLATERAL: dict[str, str] = {}


class NeverDegradedMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._state.health.retry_attempts = sys.maxsize  # MUTATION: retries never run out


provider = mutant_provider("hlt004-never-degrades", NeverDegradedMemory)
