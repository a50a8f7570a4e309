"""WM-004 broken: a recovery attempt sends the backlog newest first (the backlog read as a
stack); first attempts and retries send pending turns oldest first as they should.
"""

from __future__ import annotations

import dataclasses

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-004"
COLLATERAL: dict[str, str] = {}


class Memory(DefaultShortTermMemory):
    async def _call(self, batch):
        if batch.recovering:
            # MUTATION: the backlog's turns in reverse order of addition
            batch = dataclasses.replace(batch, entries=tuple(reversed(batch.entries)))
        return await super()._call(batch)


provider = mutant_provider("wm004-recovery-batch-newest-first", Memory)
