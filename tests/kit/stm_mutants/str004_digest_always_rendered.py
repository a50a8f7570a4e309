"""STR-004 broken: turns render their trajectory digest even when
``include_trajectory_digest`` is false.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ShortTermMemoryConfig

from . import mutant_provider

BREAKS = "STR-004"
COLLATERAL: dict[str, str] = {}


class DigestAlwaysMemory(DefaultShortTermMemory):
    def __init__(self, *, config: ShortTermMemoryConfig, **kwargs: Any) -> None:
        # MUTATION: the include_trajectory_digest setting is ignored
        config = dataclasses.replace(config, include_trajectory_digest=True)
        super().__init__(config=config, **kwargs)


provider = mutant_provider("str004-digest-always-rendered", DigestAlwaysMemory)
