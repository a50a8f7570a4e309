"""CON-003 broken: a second ``aclose()`` returns while the first is still closing.

``aclose()`` is made idempotent with an early return: ``if self._closed: return``. A
second caller (a request handler and the application's shutdown hook, both closing the
memory) returns at once while the first is still waiting for the cancelled summarizer
worker, an abandoned call or the callback queues to end: when the second ``aclose()``
returns, tasks of the memory are still running. A single ``aclose()`` is the reference's.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CON-003"
COLLATERAL: dict[str, str] = {}


class EarlyReturnCloseMemory(DefaultShortTermMemory):
    async def aclose(self) -> None:
        if self._closed:
            return  # MUTATION: "already closed" while the first aclose is still closing
        await super().aclose()


provider = mutant_provider("con003-second-aclose-returns-early", EarlyReturnCloseMemory)
