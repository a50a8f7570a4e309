"""WM-008 broken: summarizer calls have no timeout, so a hung call hangs ``flush()``.

The memory is built with ``summarizer_timeout_s=None`` whatever the configuration says.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ShortTermMemoryConfig

from . import mutant_provider

SLOW = "checks with a hung summarizer wait their whole patience for a call it never abandons"
BREAKS = "WM-008"
COLLATERAL: dict[str, str] = {}


class NoTimeoutMemory(DefaultShortTermMemory):
    def __init__(self, *, config: ShortTermMemoryConfig, **kwargs: Any) -> None:
        # MUTATION: the configured summarizer timeout is dropped
        super().__init__(config=dataclasses.replace(config, summarizer_timeout_s=None), **kwargs)


provider = mutant_provider("wm008-no-summarizer-timeout", NoTimeoutMemory)
