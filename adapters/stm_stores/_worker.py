"""One thread that runs a store's blocking calls in order, for any event loop.

A store with one connection runs its calls one at a time anyway, so a pool buys nothing;
handing a call to a thread of its own that waits on a queue costs about half what
``anyio.to_thread.run_sync`` does (its capacity limiter, cancel scope and pool), and a
SQLite save hands one call per turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["WorkerThread"]

_T = TypeVar("_T")

#: A thread idle this long ends; the next call starts another. A store nobody closes
#: then leaves no thread behind for long.
IDLE_S = 10.0


class _Call(Generic[_T]):
    """A queued call; the thread fills in its outcome, then wakes ``waiter`` on its loop."""

    __slots__ = ("ended", "error", "function", "loop", "result", "waiter")

    def __init__(self, function: Callable[[], _T], loop: asyncio.AbstractEventLoop) -> None:
        self.function = function
        self.loop = loop
        self.waiter: asyncio.Future[None] = loop.create_future()
        self.ended = False
        self.result: _T | None = None
        self.error: BaseException | None = None

    def end(self) -> None:
        """Runs on the caller's loop, after the thread filled in the outcome."""
        self.ended = True
        if not self.waiter.done():
            self.waiter.set_result(None)


class WorkerThread:
    """Runs functions in one daemon thread, started on first use, ended when idle or
    stopped."""

    def __init__(self, name: str, idle_s: float = IDLE_S) -> None:
        self._name = name
        self._idle_s = idle_s
        # The running thread and its queue of calls (``None``: no thread). A stopped thread
        # keeps its queue, and the next thread waits for it to end: calls still run one at
        # a time, in order.
        self._thread: threading.Thread | None = None
        self._inbox: queue.SimpleQueue[_Call[Any] | None] | None = None
        self._stopped: threading.Thread | None = None
        # Guards starting and ending the thread against a call queued in between.
        self._lock = threading.Lock()

    async def run(self, function: Callable[[], _T]) -> _T:
        """Run ``function`` in the thread and return its result or raise its error.

        A call cannot be stopped once queued: a caller cancelled meanwhile waits for it
        to end, then gets the ``CancelledError`` (as ``anyio.to_thread.run_sync`` does by
        default). Whatever the call did is then done.
        """
        call = _Call(function, asyncio.get_running_loop())
        with self._lock:
            inbox = self._inbox
            if inbox is None:
                inbox = queue.SimpleQueue()
                thread = threading.Thread(
                    target=self._serve, args=(inbox, self._stopped), name=self._name, daemon=True
                )
                thread.start()  # first: a thread that cannot start leaves nothing queued
                self._thread, self._inbox, self._stopped = thread, inbox, None
            inbox.put(call)
        interrupted: asyncio.CancelledError | None = None
        while not call.ended:
            try:
                await call.waiter
            except asyncio.CancelledError as exc:
                # The cancel cancelled the waiter; ``end`` runs on this loop, so it has
                # not run yet and will wake a new one.
                interrupted = exc
                call.waiter = call.loop.create_future()
        if interrupted is not None:
            raise interrupted
        if call.error is not None:
            raise call.error
        return call.result  # type: ignore[return-value]

    def stop(self) -> None:
        """End the thread once the calls queued so far have run; a later call starts
        another. Callable from the thread itself."""
        with self._lock:
            if self._inbox is not None:
                self._inbox.put(None)
                self._stopped = self._thread
                self._thread = self._inbox = None

    def _serve(
        self, inbox: queue.SimpleQueue[_Call[Any] | None], previous: threading.Thread | None
    ) -> None:
        if previous is not None:
            previous.join()
        while True:
            try:
                call = inbox.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:
                    if inbox.empty():
                        if self._inbox is inbox:
                            self._thread = self._inbox = None
                        return
                continue
            if call is None:  # stopped
                return
            try:
                call.result = call.function()
            except BaseException as exc:  # the caller's to handle, whatever it is
                call.error = exc
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
                call.loop.call_soon_threadsafe(call.end)
