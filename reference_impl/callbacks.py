"""Fire-and-forget callbacks, delivered in event order (spec group CB).

Each callback gets its own queue and a worker task that awaits calls one at a time: the
memory never waits for a callback (CB-004), and events of one kind arrive in the order they
happened (CB-003). Exceptions are logged, never left on a task.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["CallbackQueue"]

logger = logging.getLogger("reference_impl.memory")

#: How long ``aclose`` waits for a cancelled callback to end before leaving it behind.
CLOSE_GRACE_S = 1.0


class CallbackQueue:
    def __init__(self, name: str, callback: Callable[..., Awaitable[None]] | None) -> None:
        self._name = name
        self._callback = callback
        self._events: deque[tuple[Any, ...]] = deque()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def emit(self, *args: Any) -> None:
        if self._callback is None or self._closed:
            return
        self._events.append(args)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._drain(), name=f"stm-callback-{self._name}"
            )

    async def _drain(self) -> None:
        assert self._callback is not None
        while self._events:
            args = self._events.popleft()
            try:
                await self._callback(*args)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # aclose: stop delivering
                # The callback raised CancelledError itself: one more failure of a
                # callback, which must not stall the events queued behind it.
                logger.warning("%s callback raised CancelledError; ignored", self._name)
            except Exception:
                logger.warning("%s callback raised; ignored", self._name, exc_info=True)

    async def aclose(self, *, closer: asyncio.Task[Any] | None = None) -> None:
        """Drop undelivered events, deliver no more, and stop the worker; a callback that
        ignores its cancellation is abandoned after :data:`CLOSE_GRACE_S` (CON-003). From
        inside the queue's own callback (the current task, or ``closer``: the task that
        asked a memory closing in a task of its own), the worker ends when that callback
        returns."""
        self._closed = True
        self._events.clear()
        task, self._task = self._task, None
        if task is not None and task in (asyncio.current_task(), closer):
            return  # closed from inside its own callback: it ends when the callback returns
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_GRACE_S)
            task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()  # an abandoned worker's end is never logged as lost
