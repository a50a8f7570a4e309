"""Saves through a store that run to their end whatever happens to their callers.

A store may finish a write after its caller was cancelled (SQLite commits in a thread), so
``persist`` runs each save in a task of its own and only waits for it: the memory's
revision stays in step with what was written. Such a task is still the memory's work
(CON-003): ``aclose()`` waits for it, and a failure its cancelled caller can no longer
see is logged, not left on the task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

__all__ = ["Saves"]

logger = logging.getLogger("reference_impl.memory")


class Saves:
    """The saves of one memory still running."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[None]] = set()
        #: Held by a save from reading the revision it expects to advancing it, so that
        #: the saves of one memory write one after another, in the order they were made.
        self.in_order = asyncio.Lock()

    async def run(self, save: Coroutine[Any, Any, None]) -> None:
        """Run ``save`` to its end; a cancelled caller stops waiting, not the save.

        Raises:
            RuntimeError: the memory's ``aclose()`` gave up on the save and cancelled it
                (the caller was not cancelled: it gets an error, not a cancellation).
        """
        task = asyncio.ensure_future(save)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            caller = asyncio.current_task()
            if task.cancelled() and caller is not None and not caller.cancelling():
                raise RuntimeError(
                    "the save was cancelled: the memory was closed while it ran"
                ) from None
            task.add_done_callback(_log_failure)  # nobody else will see how it ends
            raise

    async def wait(self, *, exclude: asyncio.Task[Any] | None = None) -> None:
        """Wait for every save still running but ``exclude`` (a save that closes its own
        memory, from inside the store, must not wait for itself); cancelled, cancel them
        (a caller bounding ``aclose()`` with a timeout gives up on them)."""
        running = [task for task in self._running if task is not exclude]
        if not running:
            return
        try:
            await asyncio.gather(*running, return_exceptions=True)
        except asyncio.CancelledError:
            for task in running:
                task.cancel()
            raise

    def cancel(self) -> None:
        """Cancel every save still running (a closing that gave up waiting for them)."""
        for task in self._running:
            task.cancel()


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.warning("a save whose caller was cancelled failed: %r", error)
