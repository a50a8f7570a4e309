"""STR-001 broken: strategy ``none`` returns one module-level ``{}`` from every
``get_llm_context()`` ("no allocation for memory that is off"). A caller that merges into
the patch it got changes what every later call returns.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "STR-001"
COLLATERAL: dict[str, str] = {}

_EMPTY: dict = {}


class Memory(DefaultShortTermMemory):
    async def get_llm_context(self):
        if self._config.strategy == "none":
            return _EMPTY  # MUTATION: shared mutable object
        return await super().get_llm_context()


provider = mutant_provider("str001-shared-empty-view", Memory)
