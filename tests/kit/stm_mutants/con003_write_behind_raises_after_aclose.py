"""CON-003 broken: a write-behind task started by ``add_turn`` outlives ``aclose()``.

``add_turn`` hands the turn to a fire-and-forget task (``asyncio.create_task``, not kept
by the memory) that would write it somewhere once the memory settles; ``aclose()`` does
not cancel it, and the task, finding the memory closed, raises. Nobody awaits it, so its
exception is reported when the task is collected: "Task exception was never retrieved",
in whatever runs then. The reference keeps no such task.

The exception fails the check running when the task is collected, blamed on CON-003: a
task of a memory whose ``aclose()`` had been called, or one started during an earlier check
(the kit closes every memory of a check before the next starts), named in the message.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CON-003"
COLLATERAL: dict[str, str] = {}


class WriteBehindMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._write_behind_stop = asyncio.Event()

    async def add_turn(self, turn: Any) -> None:
        await super().add_turn(turn)
        asyncio.get_running_loop().create_task(self._write_behind())  # MUTATION: not owned

    async def _write_behind(self) -> None:
        await self._write_behind_stop.wait()
        raise RuntimeError("the memory was closed before its write-behind ran")

    async def aclose(self) -> None:
        self._write_behind_stop.set()
        await super().aclose()


provider = mutant_provider("con003-write-behind-raises-after-aclose", WriteBehindMemory)
