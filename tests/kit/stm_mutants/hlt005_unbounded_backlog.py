"""HLT-005 broken: the DEGRADED backlog is unbounded and drops are never counted.

The memory is built as if ``recovery_backlog_limit`` were ``sys.maxsize``.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ShortTermMemoryConfig

from . import mutant_provider

BREAKS = "HLT-005"
COLLATERAL: dict[str, str] = {}


class UnboundedBacklogMemory(DefaultShortTermMemory):
    def __init__(self, *, config: ShortTermMemoryConfig, **kwargs: Any) -> None:
        # MUTATION: the configured backlog limit is ignored
        config = dataclasses.replace(config, recovery_backlog_limit=sys.maxsize)
        super().__init__(config=config, **kwargs)


provider = mutant_provider("hlt005-unbounded-backlog", UnboundedBacklogMemory)
