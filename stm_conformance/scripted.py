"""Scripted test doubles: a summarizer whose behaviour a check controls, recording callbacks.

Both record what they receive and let a check wait for it without sleeping; both run on
whichever event loop calls them (they create their events lazily, inside that loop).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import deque
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any, Literal, get_args

import anyio

from ._patience import patient

__all__ = ["CallbackError", "FailureMode", "RecordingCallbacks", "ScriptedSummarizer"]

#: How a scripted call fails: ``raise`` (``RuntimeError``), ``string`` (the summary text alone,
#: not in a mapping), ``not_mapping`` (returns a list),
#: ``no_summary`` (``{"text": ...}``), ``non_string`` (``{"summary": 123}``), ``bytes``
#: (``{"summary": b"..."}``: the text encoded, which no decoding may make a summary), ``oversize``
#: (a summary of ``oversize_chars`` characters), ``attribute`` (an object that is no mapping
#: but has a valid ``summary`` attribute, like an LLM client's response object), ``cancel``
#: (raises ``CancelledError`` itself, as a client library may when its own request is
#: cancelled), ``base_exception`` (raises a ``BaseException`` that is no ``Exception``, as
#: some client libraries' aborts are) or ``hang`` (never returns).
FailureMode = Literal[
    "raise",
    "string",
    "not_mapping",
    "no_summary",
    "non_string",
    "bytes",
    "oversize",
    "attribute",
    "cancel",
    "base_exception",
    "hang",
]
_MODES: frozenset[str] = frozenset(get_args(FailureMode))


class _Waiters:
    """Wake every task waiting for "something changed"; events are made inside the loop."""

    def __init__(self) -> None:
        self._events: list[anyio.Event] = []

    def notify(self) -> None:
        events, self._events = self._events, []
        for event in events:
            event.set()

    async def wait(self) -> None:
        event = anyio.Event()
        self._events.append(event)
        await event.wait()


class ScriptedSummarizer:
    """A deterministic summarizer that checks can hold, fail and observe.

    Succeeding calls return ``{"summary": text}`` where ``text`` is ``previous_summary``
    followed by one line ``user:<user>`` per turn, joined by ``"\\n"`` and clipped to its
    last ``max_chars`` characters.
    """

    def __init__(
        self,
        *,
        max_chars: int = 400,
        oversize_chars: int = 100_000,
        decide_on_release: bool = False,
    ) -> None:
        """Create a summarizer that succeeds until told otherwise.

        Args:
            max_chars: longest summary returned by a succeeding call (keeps the newest text).
            oversize_chars: length of the summary returned in ``oversize`` mode.
            decide_on_release: a held call takes its outcome (succeed or a failure mode)
                when it is released, not when it starts; for drivers that script outcomes
                per step while calls may already be waiting.
        """
        if max_chars <= 0 or oversize_chars <= 0:
            raise ValueError("max_chars and oversize_chars must be > 0")
        self.max_chars = max_chars
        self.oversize_chars = oversize_chars
        self.decide_on_release = decide_on_release
        #: Deep copies of the payloads received, in call order (recorded when a call starts).
        self.calls: list[dict[str, Any]] = []
        #: ``time.monotonic()`` at the start of each call, aligned with :attr:`calls`.
        self.call_times: list[float] = []
        #: The summary each call returned, aligned with :attr:`calls`; ``None`` while a call
        #: runs and for a call that failed.
        self.outputs: list[str | None] = []
        #: Whether each call has ended (returned, raised or was cancelled), aligned with
        #: :attr:`calls`.
        self.ended: list[bool] = []
        #: Number of calls that returned a valid summary.
        self.completed = 0
        self._held = False
        #: Calls started and currently blocked by :meth:`hold`.
        self.waiting = 0
        #: Indexes of held calls :meth:`let_one_through` let go.
        self._let_through: set[int] = set()
        self._waiting_calls: list[int] = []
        #: ``time.monotonic()`` at the start of each call hanging now (``hang`` mode).
        self._hang_starts: list[float] = []
        self._queued: deque[FailureMode] = deque()
        self._always: FailureMode | None = None
        self._called = _Waiters()
        self._released = _Waiters()

    # -- scripting --------------------------------------------------------------------

    def hold(self) -> None:
        """Block calls (after they are recorded) until :meth:`release`."""
        self._held = True

    def release(self) -> None:
        """Let held calls and later ones proceed."""
        self._held = False
        self._released.notify()

    def let_one_through(self) -> None:
        """Let the oldest held call proceed while calls stay held; for stepping a memory
        one call at a time when its next call may start at any moment."""
        if self._waiting_calls:
            self._let_through.add(self._waiting_calls[0])
            self._released.notify()

    @property
    def held(self) -> bool:
        """Whether calls are currently blocked."""
        return self._held

    def fail_next(self, n: int = 1, mode: FailureMode = "raise") -> None:
        """Make the next ``n`` calls that start from now on fail in ``mode``."""
        _check_mode(mode)
        if n < 0:
            raise ValueError("n must be >= 0")
        self._queued.extend([mode] * n)

    def fail_always(self, mode: FailureMode = "raise") -> None:
        """Make every call from now on fail in ``mode`` (after any queued :meth:`fail_next`)."""
        _check_mode(mode)
        self._always = mode

    def succeed(self) -> None:
        """Make every call from now on succeed, dropping queued failures."""
        self._always = None
        self._queued.clear()

    async def wait_for_calls(self, n: int, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Wait until at least ``n`` calls have started.

        Raises:
            TimeoutError: fewer than ``n`` calls started within ``timeout`` seconds (scaled
                by ``--stm-patience``).
        """
        timeout = patient(timeout)
        with anyio.move_on_after(timeout):
            while len(self.calls) < n:
                await self._called.wait()
        if len(self.calls) < n:
            raise TimeoutError(
                f"summarizer was called {len(self.calls)} time(s) within {timeout:g}s; "
                f"the check waited for {n}"
            )

    # -- the summarizer ---------------------------------------------------------------

    async def __call__(self, payload: Any) -> Any:
        """Record ``payload``, wait while held, then succeed or fail as scripted."""
        recorded = copy.deepcopy(dict(payload) if isinstance(payload, Mapping) else payload)
        index = len(self.calls)
        self.calls.append(recorded)
        self.call_times.append(time.monotonic())
        self.outputs.append(None)
        self.ended.append(False)
        try:
            return await self._answer(index, payload)
        finally:
            self.ended[index] = True

    async def _answer(self, index: int, payload: Any) -> Any:
        mode = None if self.decide_on_release else self._next_mode()
        self._called.notify()
        self.waiting += 1
        self._waiting_calls.append(index)
        try:
            while self._held and index not in self._let_through:
                await self._released.wait()
        finally:
            self.waiting -= 1
            self._waiting_calls.remove(index)
            self._let_through.discard(index)
        if self.decide_on_release:
            mode = self._next_mode()
        if mode is not None:
            return await self._fail(mode, payload)
        summary = self.summary_for(payload)
        self.outputs[index] = summary
        self.completed += 1
        return {"summary": summary}

    def _next_mode(self) -> FailureMode | None:
        return self._queued.popleft() if self._queued else self._always

    def summary_for(self, payload: Any) -> str:
        """The summary a succeeding call returns for ``payload``."""
        if not isinstance(payload, Mapping):
            return ""
        previous = payload.get("previous_summary") or ""
        turns = payload.get("turns") or []
        lines = [str(previous)] if previous else []
        lines += [f"user:{_user(turn)}" for turn in turns]
        return "\n".join(lines)[-self.max_chars :]

    @property
    def failed(self) -> int:
        """Calls that ended without a summary (a failure mode, or cancelled: by the
        memory's timeout, say) and calls hanging now."""
        pairs = zip(self.ended, self.outputs, strict=True)
        return sum(done and out is None for done, out in pairs) + self.hanging

    @property
    def hanging(self) -> int:
        """Calls currently hanging in ``hang`` mode."""
        return len(self._hang_starts)

    @property
    def longest_hang_s(self) -> float:
        """How long the oldest call hanging now has hung (0 when none hangs)."""
        starts = self._hang_starts
        return time.monotonic() - min(starts) if starts else 0.0

    async def _fail(self, mode: FailureMode, payload: Any) -> Any:
        if mode == "raise":
            raise RuntimeError("scripted summarizer failure")
        if mode == "string":
            return self.summary_for(payload)  # the text alone, not {"summary": text}
        if mode == "not_mapping":
            return ["not", "a", "mapping"]
        if mode == "no_summary":
            return {"text": "a reply without a summary key"}
        if mode == "non_string":
            return {"summary": 123}
        if mode == "bytes":
            return {"summary": self.summary_for(payload).encode()}
        if mode == "oversize":
            return {"summary": "x" * self.oversize_chars}
        if mode == "attribute":
            return SimpleNamespace(summary=self.summary_for(payload))
        if mode == "cancel":
            raise asyncio.CancelledError("scripted summarizer cancelled itself")
        if mode == "base_exception":
            raise _Aborted("scripted summarizer aborted")
        started = time.monotonic()
        self._hang_starts.append(started)
        try:
            await anyio.sleep_forever()
        finally:
            self._hang_starts.remove(started)
        raise AssertionError("unreachable")  # pragma: no cover


class _Aborted(BaseException):
    """What the ``base_exception`` mode raises: no ``Exception``, still a failed call."""


class CallbackError(RuntimeError):
    """What :class:`RecordingCallbacks` raise with ``raise_errors``: a backend that lets it
    reach a caller broke CB-004."""


class RecordingCallbacks:
    """Callbacks for ``ShortTermMemoryConfig`` that record what they receive.

    Each callback records first, then sleeps ``delay_s`` (if any), then raises
    :class:`CallbackError` when ``raise_errors`` is true, or ``CancelledError`` of its own
    (nothing cancelled it) when ``raise_cancelled`` is.
    """

    def __init__(
        self, *, delay_s: float = 0.0, raise_errors: bool = False, raise_cancelled: bool = False
    ) -> None:
        """Create callbacks that record, optionally slowly and optionally raising."""
        self.delay_s = delay_s
        self.raise_errors = raise_errors
        self.raise_cancelled = raise_cancelled
        #: Turns passed to ``on_turn_added``, as received.
        self.turns: list[Any] = []
        #: ``(old, new)`` of each ``on_summary_updated``.
        self.summaries: list[tuple[str, str]] = []
        #: ``(old.value, new.value)`` of each ``on_health_changed``.
        self.health: list[tuple[str, str]] = []
        #: Callbacks currently inside their ``delay_s``.
        self.running = 0
        self._changed = _Waiters()

    async def on_turn_added(self, turn: Any) -> None:
        """Record ``turn``."""
        self.turns.append(turn)
        await self._after("on_turn_added")

    async def on_summary_updated(self, old: str, new: str) -> None:
        """Record a summary change."""
        self.summaries.append((old, new))
        await self._after("on_summary_updated")

    async def on_health_changed(self, old: Any, new: Any) -> None:
        """Record a health transition by value (``"healthy"``, ``"retry"``, ...)."""
        self.health.append((_value(old), _value(new)))
        await self._after("on_health_changed")

    def config_kwargs(self) -> dict[str, Any]:
        """The three callbacks as ``ShortTermMemoryConfig`` keyword arguments."""
        return {
            "on_turn_added": self.on_turn_added,
            "on_summary_updated": self.on_summary_updated,
            "on_health_changed": self.on_health_changed,
        }

    async def wait_for(
        self,
        attr: Literal["turns", "summaries", "health"],
        n: int,
        timeout: float = 5.0,  # noqa: ASYNC109 - a bounded wait is the point of the helper
    ) -> None:
        """Wait until ``len(getattr(self, attr)) >= n``.

        Raises:
            TimeoutError: fewer than ``n`` were recorded within ``timeout`` seconds (scaled
                by ``--stm-patience``).
        """
        if attr not in ("turns", "summaries", "health"):
            raise ValueError(f"unknown attribute {attr!r}")
        timeout = patient(timeout)
        with anyio.move_on_after(timeout):
            while len(getattr(self, attr)) < n:
                await self._changed.wait()
        got = len(getattr(self, attr))
        if got < n:
            raise TimeoutError(
                f"callbacks recorded {got} {attr} within {timeout:g}s; the check waited for {n}"
            )

    async def settle(self, quiet_s: float = 0.05, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Wait until no callback has been recorded for ``quiet_s`` seconds.

        Use before asserting that something was *not* (or only once) reported: callbacks
        are fire-and-forget, so a late duplicate would otherwise go unnoticed.
        """
        with anyio.move_on_after(patient(timeout)):
            while True:
                before = self._count()
                await anyio.sleep(quiet_s)
                if self._count() == before:
                    return

    def _count(self) -> int:
        return len(self.turns) + len(self.summaries) + len(self.health)

    async def _after(self, name: str) -> None:
        self._changed.notify()
        if self.delay_s > 0:
            self.running += 1
            try:
                await anyio.sleep(self.delay_s)
            finally:
                self.running -= 1
        if self.raise_errors:
            raise CallbackError(f"recording callback {name} raised on purpose")
        if self.raise_cancelled:  # as a client library may when its own request is cancelled
            raise asyncio.CancelledError(f"recording callback {name} raised CancelledError")


def _check_mode(mode: str) -> None:
    if mode not in _MODES:
        raise ValueError(f"unknown failure mode {mode!r}; expected one of {sorted(_MODES)}")


def _user(turn: Any) -> Any:
    return turn.get("user") if isinstance(turn, Mapping) else turn


def _value(state: Any) -> str:
    return str(getattr(state, "value", state))
