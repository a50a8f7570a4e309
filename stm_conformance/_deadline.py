"""Hard deadlines: every check, and every teardown step, ends whatever the backend does.

An operation of the backend runs as a child task of a *guard* (:func:`run_guarded`). The
guard waits for it with a time limit; when the limit passes it records where the task is
waiting, cancels it, gives it :data:`CANCEL_GRACE_S` to end and otherwise abandons it:
the coroutines of tasks that ignored their cancellation are closed, so nothing waits on
them later (not the next check, not the event loop's shutdown). The failure says the
operation *awaited forever* and shows the task's coroutine stack.

Synchronous code cannot be cancelled: a backend that loops forever, or sleeps in a C call,
blocks the event loop, and nothing on the loop runs any more. While a guard is active, a
watchdog thread pings the loop; when the loop does not answer for
:data:`BLOCK_THRESHOLD_S`, the watchdog captures the loop thread's stack and interrupts
that thread: a signal handler (or, off the main thread, an asynchronous exception) raises
:class:`LoopBlocked` inside the blocking code. The exception is raised only inside a task
of the backend, never inside the event loop's own machinery or the task running the
guard, so the loop survives; the guard then fails with *did not return: blocked the event
loop* and the stack at the moment the block was detected.

Between the guards of a check (an operation returned, the check goes on), the check's
deadline watches the same loop: a task the backend left running that blocks it is
interrupted the same way and fails the check (*between the check's operations*).

The interrupt is a signal (``SIGUSR2``) whose handler the kit installs once, in the main
thread; it raises only when an interrupt is pending and otherwise passes the signal on to
the handler it replaced. A block inside a hypothesis run of the check itself (kit code)
waits for the guard's deadline (its time does not count towards a block after it), and
a watchdog that was not scheduled for a while (a starved process) starts its measurement
again.

A check stopped by its own time limit (``--stm-timeout``) is *not concluded*
(:class:`CheckOutOfTime`) when it spent that time over many operations: none was left for
the next one, or the one running had started in the second half of the limit and nothing
was found stuck in it; or when, at the limit, it ran or awaited only its own code (the
kit's, the check's file, hypothesis', the standard library's: :func:`_kit_side`) with no
backend operation in flight, and in a hypothesis run of its own no call of the backend
had kept the loop for the block threshold. A slow backend, or a busy machine, does that
as well as a broken one; no requirement is judged on it. An operation that ran half the
limit or more is stuck, and fails the check as before.

A guard's limit other than the check's own counts only time the process was scheduled:
the watchdog notes when it wakes late from a short sleep while the process used no CPU
(:func:`stalled_s`: a busy machine, a ``SIGSTOP``), and the guard's deadline moves by as
much (an :class:`Allowance`, which the checks' own waits use too).

A guard also decides early that an operation can never finish, instead of waiting for the
whole time limit: when the operation, or a task it awaits, was cancelled and still runs
after :data:`IGNORED_CANCEL_S`; and, with :func:`kit_probe`, when it waits on a summarizer
call the check holds, or ``add_turn`` waits on the summarizer or a kit callback
(:data:`DEADLOCK_S`). The kit's knobs are the module constants below.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import ctypes
import functools
import math
import os
import selectors
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TypeVar

from _pytest.outcomes import OutcomeException

__all__ = [
    "AWAITED_FOREVER",
    "BLOCKED",
    "BLOCK_THRESHOLD_S",
    "CANCEL_GRACE_S",
    "CHECK_LIMIT",
    "CLOSE_TIMEOUT_S",
    "DEADLOCK_S",
    "Hop",
    "Stuck",
    "IGNORED_CANCEL_S",
    "NOT_CONCLUDED",
    "CheckOutOfTime",
    "CheckTimeout",
    "LeftoverTaskError",
    "MemoryMark",
    "LoopBlocked",
    "check_deadline",
    "close_runner",
    "coroutine_stack",
    "kit_probe",
    "await_chain",
    "note_operation",
    "operating_on",
    "noting_callers",
    "leftover_tasks",
    "remaining",
    "run_bounded",
    "run_guarded",
    "settle_tasks",
    "stalled_s",
    "wait_owned",
    "wait_scheduled",
    "Allowance",
]

T = TypeVar("T")

#: An event loop that runs no callback for this long is blocked: no legitimate memory
#: operation keeps the loop for seconds. A blocked check fails after this, not its timeout.
BLOCK_THRESHOLD_S = 2.0
#: How long a cancelled operation may take to end before it is abandoned.
CANCEL_GRACE_S = 0.5
#: Longest a provider may take to close one memory or store at teardown.
CLOSE_TIMEOUT_S = 10.0
#: How long a check may wait, through the backend, on a summarizer call it holds itself.
DEADLOCK_S = 0.5
#: How long an operation may go on after it was cancelled (by the check's own time limit,
#: say) before it is taken as ignoring cancellation.
IGNORED_CANCEL_S = 2.0
#: How often the watchdog pings the loop, and how often a waiting guard looks at its task.
_POLL_S = 0.05
#: A watchdog tick this late means the process was starved: block measurements restart.
_STARVED_S = 0.5
_LOOK_S = 0.1
#: Passes of the loop a guarded task gets before the guard arms a timed wait.
_FREE_PASSES = 4
#: Frames of the stacks shown in failure messages (the innermost ones).
_MAX_FRAMES = 30

#: The reason of a check whose backend blocked the event loop.
BLOCKED = "did not return: blocked the event loop"
#: The reason of a check whose backend awaited something that never happened.
AWAITED_FOREVER = "awaited forever"
#: ``limit`` of a guard whose time is what remains of the check's: its end is the check's.
CHECK_LIMIT = " (--stm-timeout)"
#: How the message of a :class:`CheckOutOfTime` opens: the report blames no requirement.
NOT_CONCLUDED = "not concluded"
_SLOW = (
    "nothing was found stuck, so no requirement is judged: the backend is slow, or the "
    "machine busy (a larger --stm-timeout lets the check finish)"
)

_INTERRUPT_SIGNAL: signal.Signals | None = getattr(signal, "SIGUSR2", None)
_ASYNCIO_DIR = os.path.dirname(asyncio.__file__) + os.sep
_SELECTORS_FILE = selectors.__file__
_HANDLE_RUN = asyncio.Handle._run.__code__
_SPAWNED: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
#: The check running (its node ID, from :func:`check_deadline`), noted on the tasks started
#: during it, so that a task that raises after its check ended is told apart.
_check: str | None = None
#: The file of the running check's code (from :func:`check_deadline`): its frames are the
#: check's own, like the kit's (:func:`_kit_side`).
_check_file: str | None = None
#: The frame that entered :func:`check_deadline` (the plugin's, running the check).
_check_root: FrameType | None = None


@dataclass
class MemoryMark:
    """One memory of a check, noted on the tasks its operations start (:func:`operating_on`)."""

    #: Its ``aclose()`` (or the provider's ``close``) has been called: from then on its
    #: tasks end cancelled, not raising an exception nobody retrieves (CON-003).
    closed: bool = False


@dataclass(slots=True)
class _Origin:
    """Where a task started: the check, the task's name, and the memory whose operation
    started it (``None``: none the kit knows of)."""

    check: str
    name: str
    memory: MemoryMark | None
    #: It ended, raising, after that memory's closing began.
    outlived_close: bool = False


#: The memory whose operation the code running in this context belongs to.
_MEMORY: contextvars.ContextVar[MemoryMark | None] = contextvars.ContextVar(
    "stm_memory", default=None
)
#: ``id(task)`` -> where it started, for the tasks started during a check that may still
#: report an exception nobody retrieved; the rest are dropped as they end. Keyed by id,
#: not weakly: the cyclic collector clears weak references before it runs the finalizer
#: that reports the exception. The name guards against a reused id.
_ORIGINS: dict[int, _Origin] = {}
#: Tasks that have called a summarizer wrapped by :func:`noting_callers`.
_SUMMARIZING: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()


class CheckTimeout(OutcomeException):
    """A check or teardown step stopped by its deadline; the message says why and where.

    A pytest outcome, not an ``Exception``: backend code catching ``Exception`` does not
    swallow it, hypothesis does not shrink on it and anyio's test runner survives it.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, pytrace=False)


class CheckOutOfTime(CheckTimeout):
    """The check is not concluded, and its message opens with :data:`NOT_CONCLUDED`: its
    time limit (``--stm-timeout``) ended it while no operation was found stuck, or it was
    not scheduled in time to see what it needed (``checks.not_concluded``)."""


class LoopBlocked(CheckTimeout):
    """Raised by the watchdog inside backend code that blocks the event loop."""

    def __init__(self, message: str = "") -> None:  # raised by class off the main thread
        super().__init__(message or f"{BLOCKED}: interrupted by the conformance kit's watchdog")


class LeftoverTaskError(AssertionError):
    """A task raised, unretrieved, after the memories that could own it were closed
    (CON-003): one started during an earlier check (the kit closes every memory a check
    made before the next check starts), or by an operation of a memory whose ``aclose()``
    had been called (which must end its tasks by cancelling them). Its exception is
    reported in whichever check runs when the task is collected, and must not be judged as
    that check's failure.
    """


# -- the check's deadline ---------------------------------------------------------------

_deadline: float | None = None
#: The running check's whole time limit, in seconds (``None``: no check or no limit).
_check_limit: float | None = None
#: The backend operations the running check awaits through its memory wrapper, with when
#: each started (``time.monotonic()``): at the check's time limit, one that started late
#: says the check ran out of time rather than found the backend stuck.
_operations: weakref.WeakKeyDictionary[asyncio.Future[Any], float] = weakref.WeakKeyDictionary()
#: The loop of the latest guard: between two guards of a check, the check's deadline
#: watches it for blocks (a backend task may block it after an operation returned).
_last_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None


def remaining() -> float | None:
    """Seconds left to the running check's deadline (``None``: no check or no limit)."""
    return None if _deadline is None else _deadline - time.monotonic()


@contextlib.contextmanager
def check_deadline(
    seconds: float | None, check: str | None = None, code_file: str | None = None
) -> Iterator[None]:
    """Set the deadline of the check running in this block (``None`` or 0: no limit).

    :func:`remaining` reads it (a guard without an explicit limit uses it). Synchronous
    code that runs past it outside any event loop is interrupted by the watchdog.
    ``check`` names the check (its node ID) on the tasks started in the block: one that
    raises after the block, unretrieved, fails the check then running with a
    :class:`LeftoverTaskError` that names this one. ``code_file`` is the file of the
    check's code: time spent there, like in the kit's, is the check's own.
    """
    global _deadline, _check_limit, _operations, _check, _check_file, _check_root
    previous = _deadline, _check_limit, _operations, _check, _check_file, _check_root
    _deadline = time.monotonic() + seconds if seconds else None
    _check_limit = seconds or None
    _operations = weakref.WeakKeyDictionary()
    _check = check
    _check_file = code_file
    _check_root = sys._getframe(2)  # this generator's, contextlib's __enter__, the caller's
    watch = None
    if seconds and threading.current_thread() is threading.main_thread():
        watch = _Watch(None, threading.get_ident(), BLOCK_THRESHOLD_S, None)
        watch.hard_deadline = time.monotonic() + seconds + BLOCK_THRESHOLD_S + 2 * CANCEL_GRACE_S
        watch.message = f"check did not finish within {seconds:g}s (--stm-timeout)"
    try:
        with _watching(watch):
            yield
    finally:
        _deadline, _check_limit, _operations, _check, _check_file, _check_root = previous
    if watch is not None and watch.blocked is not None:
        raise CheckTimeout(
            f"check {BLOCKED} between the check's operations (no callback ran for "
            f"{watch.blocked_for:.2g}s): a task of the backend blocked it\n"
            f"stack of the event loop's thread when the block was detected:\n{watch.blocked}"
        )


def note_operation(task: asyncio.Future[Any]) -> None:
    """Note that the running check awaits ``task``, a backend operation, from now on."""
    _operations[task] = time.monotonic()


def _started_late() -> bool:
    """Whether the backend operations the check awaits, when there are any, all started
    with less than half of the check's limit left: the check had spent the rest."""
    if _deadline is None or _check_limit is None:
        return False
    starts = [started for task, started in _operations.items() if not task.done()]
    return bool(starts) and _deadline - min(starts) < _check_limit / 2


def _waits_on_its_own(chain: list[FrameType | Hop]) -> bool:
    """Whether the check, waiting in ``chain``, awaits only its own code: no backend
    operation in flight, no frame of the backend's (a poll's sleep, say)."""
    if any(not task.done() for task in _operations):
        return False
    return all(isinstance(item, Hop) or _kit_side(item) for item in chain)


#: Top-level modules whose code runs the checks (with the standard library's): time
#: spent or waited there is the check's own, not the backend's.
_KIT_PACKAGES = frozenset(
    {"stm_conformance", "hypothesis", "_hypothesis_pytestplugin", "_pytest", "pytest"}
    | {"pluggy", "anyio", "attr", "sortedcontainers", "exceptiongroup"}
) | frozenset(sys.stdlib_module_names)
#: The kit's own files (the checks among them), for :func:`_kit_side` and the differential.
_KIT_DIR = os.path.dirname(os.path.realpath(__file__)) + os.sep


def _kit_side(frame: FrameType) -> bool:
    """Whether ``frame`` runs the check's own code (the kit's, the running check's file,
    hypothesis', pytest's, the standard library's) rather than the backend's."""
    filename = frame.f_code.co_filename
    if filename.startswith(_KIT_DIR) or filename == _check_file:
        return True
    name = frame.f_globals.get("__name__")
    return isinstance(name, str) and name.partition(".")[0] in _KIT_PACKAGES


def _backend_call(frame: FrameType | None, *, in_example: bool = False) -> FrameType | None:
    """The outermost frame of backend code on a thread's stack from ``frame`` out to the
    event loop's callback, or to the check's start (the frame that entered
    :func:`check_deadline`; what runs the check lies beyond): the call of the backend
    under way, or ``None`` when only the check's own code runs.

    ``in_example``: only out to hypothesis' frames (the example running). The watchdog
    looks every poll while the thread runs on: CPython 3.11.2 crashed walking a running
    thread's outer (coroutine) frames, not the frames of the example, which
    :func:`_runs_hypothesis` has always walked."""
    found = None
    package = _hypothesis_dir() if in_example else None
    while frame is not None and frame.f_code is not _HANDLE_RUN and frame is not _check_root:
        if package is not None and frame.f_code.co_filename.startswith(package):
            break
        if not _kit_side(frame):
            found = frame
        frame = frame.f_back
    return found


# -- guards -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Hop:
    """In an await chain: the task before it awaits ``task``."""

    name: str
    task: asyncio.Task[Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class Stuck:
    """A probe's finding: why the operation cannot finish; decided after ``after_s``."""

    why: str
    after_s: float


def _ignoring_cancellation(task: asyncio.Task[Any], chain: list[FrameType | Hop]) -> Stuck | None:
    """``task``, or a task it awaits, was cancelled and goes on: it ignores cancellation."""
    ignored = (
        f"still running {IGNORED_CANCEL_S:g}s after it was cancelled: the cancellation is ignored"
    )
    if task.cancelling():
        return Stuck(ignored, IGNORED_CANCEL_S)
    for item in chain:
        if isinstance(item, Hop) and item.task.cancelling() and not item.task.done():
            return Stuck(f"waiting on task {item.name!r}, {ignored}", IGNORED_CANCEL_S)
    return None


#: Looks at where a guarded task waits (its frames, outermost first, and hops into the
#: tasks it awaits) and says whether it can never finish.
Probe = Callable[[list["FrameType | Hop"]], "Stuck | None"]


async def run_guarded(
    coro: Awaitable[T],
    *,
    seconds: float | None,
    what: str,
    probe: Probe | None = None,
    block_s: float | None = None,
    limit: str = "",
) -> T:
    """Run ``coro`` in a child task and return its result within ``seconds``.

    ``what`` names the operation in failure messages, ``limit`` where ``seconds`` comes
    from (:data:`CHECK_LIMIT` when it is the check's remaining time); ``block_s`` defaults
    to :data:`BLOCK_THRESHOLD_S`.

    Raises:
        CheckOutOfTime: ``limit`` is :data:`CHECK_LIMIT`, and no time was left, or the
            time passed with nothing found stuck and ``seconds`` was less than half the
            check's limit, or the backend operations the check awaited
            (:func:`note_operation`) all started with less than that left (the check spent
            the rest on other operations).
        CheckTimeout: the time passed, the task (or a task it awaits) was cancelled and
            still runs after :data:`IGNORED_CANCEL_S`, or ``probe`` found it waiting on
            something only the caller could end (*awaited forever*); or the
            event loop was blocked for ``block_s`` (*blocked the event loop*).
    """
    __tracebackhide__ = True
    if seconds is not None and seconds <= 0:
        if isinstance(coro, Coroutine):
            coro.close()
        message = f"{what}: no time left before the check's deadline{limit}"
        if limit == CHECK_LIMIT:
            raise CheckOutOfTime(f"{NOT_CONCLUDED}: {message}; {_SLOW}")
        raise CheckTimeout(message)
    loop = asyncio.get_running_loop()
    global _last_loop
    _last_loop = weakref.ref(loop)
    recorder = _recorder(loop)
    recorder.guards += 1
    try:
        task = loop.create_task(_as_coroutine(coro), name=f"stm-conformance: {what}")
        return await _guard(task, seconds, what, probe, block_s, limit)
    finally:
        recorder.guards -= 1


class _SpawnRecorder:
    """A loop's task factory that notes the tasks created while a guard runs on it (the
    operation's, and those it starts and may leave running: settled when the loop ends),
    wrapping the factory it replaced.

    Cheaper than comparing ``asyncio.all_tasks()`` before and after each operation, which
    walks every task not yet garbage-collected (a hundred on average in a run of the
    suite, nearly all done): a run against the reference took 2.56 CPU-s instead of 2.80
    (medians of seven runs each).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.guards = 0

    def __call__(
        self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any
    ) -> asyncio.Future[Any]:
        if self.inner is None:
            task: asyncio.Future[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        else:
            task = self.inner(loop, coro, **kwargs)
        if self.guards and isinstance(task, asyncio.Task):
            _SPAWNED.add(task)
            if _check is not None:
                _ORIGINS[id(task)] = _Origin(_check, task.get_name(), _MEMORY.get())
                task.add_done_callback(_forget_origin)
        return task


@contextlib.contextmanager
def operating_on(memory: MemoryMark) -> Iterator[None]:
    """Note ``memory`` on the tasks started in this block, and on those they start."""
    token = _MEMORY.set(memory)
    try:
        yield
    finally:
        _MEMORY.reset(token)


def _forget_origin(task: asyncio.Task[Any]) -> None:
    # An exception still to be reported sets ``_log_traceback`` (asyncio's flag for "never
    # retrieved"); reading ``exception()`` here would clear it.
    if not getattr(task, "_log_traceback", False):
        _ORIGINS.pop(id(task), None)
        return
    origin = _ORIGINS.get(id(task))
    if origin is not None and origin.memory is not None and origin.memory.closed:
        origin.outlived_close = True


class _LeftoverHandler:
    """A loop's exception handler that reports the unretrieved exception of a task left
    running (started during an earlier check, or by an operation of a memory whose
    closing had begun when it raised) as a :class:`LeftoverTaskError`, then hands it on
    to the handler it wraps (pytest-anyio's raises what it gets after the running test)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        task = context.get("future", context.get("task"))
        error = context.get("exception")
        origin = _ORIGINS.pop(id(task), None) if isinstance(task, asyncio.Task) else None
        if (
            origin is not None
            and origin.name == task.get_name()  # type: ignore[union-attr]
            and (origin.check != _check or origin.outlived_close)
            and isinstance(error, Exception)
        ):
            where = (
                "by an operation of a memory this check closed, was still running when "
                "its aclose() was called"
                if origin.check == _check
                else f"during {origin.check}, was still running after that check had "
                "closed its memories"
            )
            leftover = LeftoverTaskError(
                f"CON-003: a task ({origin.name}) started {where}, and raised {error!r}, "
                "which nobody retrieved; it is not this check's failure"
            )
            leftover.__cause__ = error
            context = {**context, "exception": leftover}
        if self.inner is None:
            loop.default_exception_handler(context)
        else:
            self.inner(loop, context)


def _recorder(loop: asyncio.AbstractEventLoop) -> _SpawnRecorder:
    """The loop's :class:`_SpawnRecorder`, installed over its factory when it has none
    (or when the backend replaced it)."""
    handler = loop.get_exception_handler()
    if not isinstance(handler, _LeftoverHandler):
        loop.set_exception_handler(_LeftoverHandler(handler))
    factory = loop.get_task_factory()
    if isinstance(factory, _SpawnRecorder):
        return factory
    recorder = _SpawnRecorder(factory)
    loop.set_task_factory(recorder)
    return recorder


async def _guard(
    task: asyncio.Task[T],
    seconds: float | None,
    what: str,
    probe: Probe | None,
    block_s: float | None,
    limit: str,
) -> T:
    __tracebackhide__ = True
    loop = task.get_loop()
    woken: asyncio.Future[Any] | None = None  # made for a timed wait, if one comes

    def wake() -> None:
        if woken is not None and not woken.done():
            woken.set_result(None)

    blocked_after = min(seconds or math.inf, BLOCK_THRESHOLD_S if block_s is None else block_s)
    watch = _Watch(loop, threading.get_ident(), blocked_after, asyncio.current_task(), wake)
    if seconds is not None:
        watch.deadline = time.monotonic() + seconds
    deadline = None if seconds is None else loop.time() + seconds
    # A limit on the backend's time counts only time the process was scheduled (the
    # check's own limit is the check's: not moved).
    allowance = None if seconds is None or limit == CHECK_LIMIT else Allowance(seconds)
    stuck: Stuck | None = None
    stuck_since = 0.0
    reason: str | None = None
    out_of_time = False  # the check's time ran out with nothing found stuck
    stack = ""
    try:
        with _watching(watch):
            # Most operations end within a few passes of the loop (a guard nested in this
            # one takes three): let the task have them before a timed wait, which costs a
            # timer and callbacks on both futures each time (a differential step: 55 µs of
            # guarding became 31).
            for _ in range(_FREE_PASSES):
                await asyncio.sleep(0)
                if task.done():
                    break
            woken = None if task.done() else loop.create_future()
            waiting: set[asyncio.Future[Any]] = {task} if woken is None else {task, woken}
            while not task.done() and watch.blocked is None:
                now = loop.time()
                if allowance is not None:
                    left = allowance.left()
                    deadline = now + left
                    watch.deadline = time.monotonic() + left
                wait = _LOOK_S if deadline is None else min(deadline - now, _LOOK_S)
                if wait <= 0:
                    # Started late in the check (this operation, or the backend's one
                    # the check awaits), or waiting on nothing of the backend's, and no
                    # probe's finding on its way.
                    out_of_time = (
                        limit == CHECK_LIMIT
                        and stuck is None
                        and _check_limit is not None
                        and seconds is not None
                        and (
                            seconds < _check_limit / 2
                            or _started_late()
                            or _waits_on_its_own(await_chain(task))
                        )
                    )
                    reason = f"did not finish within {seconds:g}s{limit}: {AWAITED_FOREVER}"
                    break
                await asyncio.wait(waiting, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                if task.done():
                    break
                now = loop.time()
                chain = _own_part(await_chain(task))
                found = _ignoring_cancellation(task, chain)
                probed = probe(chain) if probe is not None else None
                if probed is not None and (found is None or probed.after_s < found.after_s):
                    found = probed  # the finding decided sooner
                if found != stuck:
                    stuck, stuck_since = found, now
                elif found is not None and now - stuck_since >= found.after_s:
                    reason = f"{AWAITED_FOREVER} ({found.why})"
                    break
            if reason is not None:
                stack = coroutine_stack(task)
    except asyncio.CancelledError:
        await _stop(task)
        raise
    if watch.blocked is None and task.done() and not _raised(task, LoopBlocked):
        return task.result()
    blocked = watch.blocked  # set after own_time, by the watchdog's thread
    own_run = False
    if blocked is not None or _raised(task, LoopBlocked):
        reason = f"{BLOCKED} (no callback ran for {watch.blocked_for or blocked_after:.2g}s)"
        stack = blocked or "(no stack captured)"
        where = "stack of the event loop's thread when the block was detected"
        # The check's own hypothesis run outlasted the limit: no call of the backend in
        # it held the loop for the block's threshold.
        own_run = blocked is not None and watch.own_time
        out_of_time = own_run and limit == CHECK_LIMIT and _check_limit is not None
    else:
        where = "where it waited when it was stopped"
    ended = await _stop(task)
    after = "" if ended else "; it ignored cancellation and was abandoned"
    # A task that ignores its cancellation is stuck; the check's own hypothesis run, whose
    # interrupt waits for a place safe to raise it, may just take longer to end.
    if out_of_time and (ended or own_run):
        held = (
            f" (its own hypothesis run held the event loop: no call of the backend in it "
            f"ran for {blocked_after:.2g}s)"
            if own_run
            else ""
        )
        raise CheckOutOfTime(
            f"{NOT_CONCLUDED}: {what} did not finish within {seconds:g}s{limit}{held}{after}; "
            f"{_SLOW}\n{where}:\n{stack}".rstrip()
        )
    raise CheckTimeout(f"{what} {reason}{after}\n{where}:\n{stack}".rstrip())


def _own_part(chain: list[FrameType | Hop]) -> list[FrameType | Hop]:
    """``chain`` up to a guard nested in it: what lies below is that guard's to judge."""
    for index, item in enumerate(chain):
        if not isinstance(item, Hop) and item.f_code is _guard.__code__:
            return chain[:index]
    return chain


def _as_coroutine(awaitable: Awaitable[T]) -> Coroutine[Any, Any, T]:
    if isinstance(awaitable, Coroutine):
        return awaitable

    async def wait() -> T:
        return await awaitable

    return wait()


def _raised(task: asyncio.Task[Any], kind: type[BaseException]) -> bool:
    return task.done() and not task.cancelled() and isinstance(task.exception(), kind)


async def _stop(task: asyncio.Task[Any]) -> bool:
    """Cancel ``task`` and wait :data:`CANCEL_GRACE_S`; abandon what ignores cancellation.

    Returns whether ``task`` ended within the grace.
    """
    if not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_GRACE_S)
    ended = task.done()
    if ended:
        _retrieve(task)
    _dispose(_stubborn_tasks())
    return ended


def _stubborn_tasks() -> list[asyncio.Task[Any]]:
    """Pending tasks whose cancellation was requested, other than the running one."""
    current = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t is not current and not t.done() and t.cancelling()]


def _dispose(tasks: list[asyncio.Task[Any]]) -> None:
    """Close the coroutines of tasks that ignore cancellation, so that they can end.

    A closed coroutine raises ``GeneratorExit`` where it waits; its task then ends at its
    next step (cancelling it makes that step come now).
    """
    for task in tasks:
        with contextlib.suppress(RuntimeError, ValueError):  # it caught GeneratorExit too
            task.get_coro().close()
        task.cancel()
        task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Task[Any]) -> None:
    # Retrieve the outcome so that it is never logged as "never retrieved".
    if not task.cancelled():
        task.exception()


async def wait_owned(task: asyncio.Future[Any], seconds: float) -> bool:
    """Whether ``task``, which the caller started and owns, ended within ``seconds``.

    Unlike a bare ``asyncio.wait``, a cancelled caller (a check stopped by its time limit)
    cancels ``task`` too: left running, it would go on acting on a memory the check has
    closed, and its error would surface in the next check.
    """
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    return bool(done)


class Allowance:
    """``seconds`` from now, counting only time the process was scheduled: every stall of
    the whole process (:func:`stalled_s`) moves the end by as long, so that a limit on
    what the backend does is a limit on the time it had. Once out of time, a last look
    after the watchdog's next polls, which note a stall that ended just now."""

    __slots__ = ("_grace_end", "_graced_stall", "seconds", "started")

    def __init__(self, seconds: float) -> None:
        self.started = time.monotonic()
        self.seconds = seconds
        self._grace_end: float | None = None
        self._graced_stall = 0.0

    def left(self) -> float:
        """Seconds left; zero or less once out of time."""
        now = time.monotonic()
        end = self.started + self.seconds
        if now < end:  # the common case, without looking at the stalls
            return end - now
        stalled = stalled_s(self.started, now)
        if end + stalled > now:
            return end + stalled - now
        if self._grace_end is None or stalled > self._graced_stall:
            self._grace_end, self._graced_stall = now + 2 * _POLL_S, stalled
        return self._grace_end - now


async def wait_scheduled(task: asyncio.Future[Any], seconds: float) -> bool:
    """:func:`wait_owned` within an :class:`Allowance` of ``seconds``."""
    allowance = Allowance(seconds)
    while (left := allowance.left()) > 0:
        if await wait_owned(task, left):
            return True
    return task.done()


def leftover_tasks() -> set[asyncio.Task[Any]]:
    """Pending tasks of the running loop that guarded operations started and left running."""
    loop = asyncio.get_running_loop()
    return {t for t in _SPAWNED if not t.done() and t.get_loop() is loop}


async def settle_tasks(tasks: set[asyncio.Task[Any]] | None = None) -> None:
    """Cancel ``tasks`` (default: every other pending task of the running loop); abandon
    those that ignore it.

    Run before a loop shuts down: its shutdown cancels the remaining tasks and waits for
    them, forever if one of them ignores cancellation.
    """
    current = asyncio.current_task()
    if tasks is None:
        tasks = asyncio.all_tasks()
    tasks = {t for t in tasks if t is not current and not t.done()}
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks, timeout=CANCEL_GRACE_S)
    stubborn = [t for t in tasks if not t.done()]
    for task in tasks - set(stubborn):
        _retrieve(task)
    if stubborn:
        _dispose(stubborn)
        await asyncio.wait(stubborn, timeout=CANCEL_GRACE_S)


# -- synchronous callers: an ``asyncio.Runner`` ------------------------------------------


def run_bounded(
    runner: asyncio.Runner,
    coro: Coroutine[Any, Any, T],
    *,
    seconds: float | None = None,
    what: str = "a step of the differential",
) -> T:
    """``runner.run(coro)``, guarded like :func:`run_guarded`.

    ``seconds`` defaults to the running check's remaining time. Without a check deadline
    (``--stm-timeout 0``, or outside the kit) ``coro`` runs unguarded.
    """
    left = remaining()
    if left is None:
        return _run_on(runner, coro)
    left = left if seconds is None else seconds
    note = CHECK_LIMIT if seconds is None else ""
    guarded = run_guarded(coro, seconds=left, what=what, probe=kit_probe, limit=note)
    return _run_on(runner, guarded)


def _run_on(runner: asyncio.Runner, coro: Coroutine[Any, Any, T]) -> T:
    """``runner.run(coro)``, without the SIGINT handler that ``Runner.run`` installs and
    removes on every call. Removing it cost about a sixth of a differential step:
    ``signal.getsignal`` tries to read the handler, a ``partial`` holding the task, as a
    ``Handlers`` member, and the failed lookup formats the task's repr. Ctrl-C still
    stops the run (``KeyboardInterrupt`` leaves the loop)."""
    return runner.get_loop().run_until_complete(coro)


def close_runner(runner: asyncio.Runner) -> None:
    """Close ``runner`` without waiting forever for a task that ignores cancellation."""
    try:
        runner.run(settle_tasks())
    except RuntimeError:  # already closed
        pass
    finally:
        runner.close()


# -- stacks -----------------------------------------------------------------------------


def await_chain(task: asyncio.Task[Any]) -> list[FrameType | Hop]:
    """The frames ``task`` waits in, outermost first, following the tasks it awaits."""
    chain: list[FrameType | Hop] = []
    seen: set[int] = set()
    current: asyncio.Task[Any] | None = task
    while current is not None and id(current) not in seen and len(chain) < 200:
        seen.add(id(current))
        obj: Any = current.get_coro()
        while obj is not None:
            frame = getattr(obj, "cr_frame", None) or getattr(obj, "gi_frame", None)
            if frame is None:
                break
            chain.append(frame)
            obj = getattr(obj, "cr_await", None) or getattr(obj, "gi_yieldfrom", None)
        waiter: Any = getattr(current, "_fut_waiter", None)
        following = None
        if isinstance(waiter, asyncio.Task):
            following = waiter
        elif waiter is not None:
            # asyncio.gather's future: follow a pending child task. asyncio.wait, wait_for
            # and shield wait on a future that a task's done-callback completes.
            for child in getattr(waiter, "_children", None) or ():
                if isinstance(child, asyncio.Task) and not child.done():
                    following = child
                    break
            else:
                following = _task_completing(waiter, current.get_loop())
        if following is not None:
            chain.append(Hop(following.get_name(), following))
        current = following
    return chain


def _task_completing(
    future: asyncio.Future[Any], loop: asyncio.AbstractEventLoop
) -> asyncio.Task[Any] | None:
    """A pending task whose done-callbacks would complete ``future`` (they refer to it)."""
    for task in asyncio.all_tasks(loop):
        for callback, _context in getattr(task, "_callbacks", None) or ():
            if _refers_to(callback, future):
                return task
    return None


def _refers_to(callback: Any, target: object) -> bool:
    if isinstance(callback, functools.partial):
        return any(arg is target for arg in callback.args) or _refers_to(callback.func, target)
    for cell in getattr(callback, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            if cell.cell_contents is target:
                return True
    return getattr(callback, "__self__", None) is target


def coroutine_stack(task: asyncio.Task[Any]) -> str:
    """Where ``task`` waits: its coroutine stack, into the tasks it awaits."""
    parts: list[str] = []
    frames: list[FrameType] = []

    def flush() -> None:
        if frames:
            summary = traceback.StackSummary.extract((f, f.f_lineno) for f in frames)
            parts.extend(summary.format())
            frames.clear()

    for item in await_chain(task):
        if isinstance(item, Hop):
            flush()
            parts.append(f"  ... awaiting task {item.name!r}:\n")
        else:
            frames.append(item)
    flush()
    if task.done():
        return "  (the task had ended)\n"
    return "".join(parts[-_MAX_FRAMES:]) or "  (no Python frame: the task awaits a future)\n"


def noting_callers(summarizer: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Any]:
    """``summarizer``, noting the tasks that call it (for :func:`kit_probe`)."""

    async def summarize(payload: Any) -> Any:
        task = asyncio.current_task()
        if task is not None:
            _SUMMARIZING.add(task)
        return await summarizer(payload)

    return summarize


def kit_probe(chain: list[FrameType | Hop]) -> Stuck | None:
    """The kit's :data:`Probe`: an operation that waits on what only the check can end.

    Stuck after :data:`DEADLOCK_S`, when the chain holds
    - a held ``ScriptedSummarizer`` call: only the check releases it;
    - ``add_turn``, and below it a summarizer call or a task that called a summarizer
      the kit gave the backend (:func:`noting_callers`): ``add_turn`` waits for the
      summarizer (WM-001), which the check may hold or fail at will;
    - ``add_turn``, and below it a kit callback (``RecordingCallbacks``): ``add_turn``
      awaits a callback (CB-004), which the check may slow down at will.
    """
    from .scripted import RecordingCallbacks, ScriptedSummarizer

    task: asyncio.Task[Any] | None = None  # the task of the frames walked, once known
    waits_for_summarizer = False
    in_add_turn = False
    for item in chain:
        if isinstance(item, Hop):
            task = item.task
            waits_for_summarizer = waits_for_summarizer or (in_add_turn and task in _SUMMARIZING)
            continue
        name = item.f_code.co_name
        owner = item.f_locals.get("self") if name != "add_turn" else None
        if isinstance(owner, ScriptedSummarizer) and name == "__call__":
            if owner.held:
                return Stuck(
                    "waiting on a summarizer call the check holds (ScriptedSummarizer.hold()), "
                    "which only the check can release",
                    DEADLOCK_S,
                )
            waits_for_summarizer = waits_for_summarizer or in_add_turn
        elif isinstance(owner, RecordingCallbacks) and in_add_turn:
            return Stuck(f"waiting on the callback {name}, awaited inside add_turn", DEADLOCK_S)
        elif name == "add_turn":
            in_add_turn = True
    if waits_for_summarizer:
        return Stuck("waiting on the summarizer, from inside add_turn", DEADLOCK_S)
    return None


def _blocked_stack(frame: FrameType | None) -> str:
    """The stack of a blocked loop's thread, from the callback the loop is running."""
    if frame is None:
        return "  (the thread has no Python frame)\n"
    entries = traceback.extract_stack(frame)
    start = 0
    for i, entry in enumerate(entries):
        if entry.filename == _HANDLE_RUN.co_filename and entry.name == _HANDLE_RUN.co_name:
            start = i + 1
    return "".join(traceback.format_list(entries[start:][-_MAX_FRAMES:]))


# -- the watchdog -----------------------------------------------------------------------


@dataclass(eq=False)
class _Watch:
    """One guarded region, watched by the watchdog thread."""

    loop: asyncio.AbstractEventLoop | None
    thread_id: int
    block_s: float
    protected: asyncio.Task[Any] | None
    on_blocked: Callable[[], None] | None = None
    #: For a region without a loop: when to interrupt the thread, and with what message.
    hard_deadline: float | None = None
    message: str = ""
    sent: int = 0
    answered: int = 0
    sent_at: float = 0.0
    #: The stack of the loop's thread, once the loop is found blocked, and for how long.
    blocked: str | None = None
    blocked_for: float = 0.0
    #: When the guard's time is up (``time.monotonic()``), if it has a limit.
    deadline: float | None = None
    next_interrupt: float = 0.0
    #: An interrupt waits to be raised in the watched thread.
    pending: BaseException | None = None
    #: While the loop runs a hypothesis run of the check: the call of the backend under
    #: way (:func:`_backend_call`) when last looked at, and since when.
    call: FrameType | None = None
    call_since: float = 0.0
    #: The block was the check's own hypothesis run going past the guard's deadline.
    own_time: bool = False
    uses_signal: bool = field(default=False)

    def pong(self, seq: int) -> None:
        self.answered = seq


class _Watchdog:
    """A daemon thread that watches every active guard's loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: list[_Watch] = []
        self._active = threading.Event()
        self._thread: threading.Thread | None = None
        self._handler_installed = False
        self._previous_handler: Any = None

    def add(self, watch: _Watch) -> None:
        if (
            _INTERRUPT_SIGNAL is not None
            and watch.thread_id == threading.main_thread().ident
            and threading.current_thread() is threading.main_thread()
        ):
            self._install_handler()
            watch.uses_signal = self._handler_installed
        with self._lock:
            self._watches.append(watch)
            if not self._active.is_set():  # the thread clears it, not remove(): guards
                self._active.set()  # come and go thousands of times a second
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="stm-conformance-watchdog", daemon=True
                )
                self._thread.start()

    def remove(self, watch: _Watch) -> None:
        with self._lock:
            self._watches.remove(watch)
            watch.pending = None

    def pending_for(self, thread_id: int) -> _Watch | None:
        # Called by the signal handler, maybe while this thread holds the lock: no lock.
        for watch in reversed(list(self._watches)):
            if watch.thread_id == thread_id and watch.pending is not None:
                return watch
        return None

    def _install_handler(self) -> None:
        # Installed once and kept: restoring the default action could let a late signal
        # end the process. With nothing pending, the handler passes the signal on.
        if self._handler_installed or _INTERRUPT_SIGNAL is None:
            return
        with contextlib.suppress(ValueError, OSError):
            self._previous_handler = signal.signal(_INTERRUPT_SIGNAL, _on_interrupt_signal)
            self._handler_installed = True

    def previous_handler(self) -> Any:
        return self._previous_handler

    def _run(self) -> None:
        last = time.monotonic()
        while True:
            self._active.wait()
            slept_at, cpu_at = time.monotonic(), time.process_time()
            time.sleep(_POLL_S)
            _note_stall(slept_at + _POLL_S, time.monotonic(), time.process_time() - cpu_at)
            with self._lock:
                watches = list(self._watches)
                if not watches:
                    self._active.clear()  # add() sets it again, under the same lock
            now = time.monotonic()
            if now - last > _STARVED_S:
                # This thread did not run for a while: the whole process was starved (a
                # loaded machine), not just the loop. Measure afresh.
                for watch in watches:
                    watch.sent_at = max(watch.sent_at, now)
            last = now
            guarded = {w.thread_id for w in watches if w.loop is not None}
            for watch in watches:
                try:
                    if watch.loop is None and watch.thread_id not in guarded:
                        self._tick_between_guards(watch, now)
                    self._tick(watch)
                except Exception:  # the watchdog must keep running
                    continue

    def _tick(self, watch: _Watch) -> None:
        now = time.monotonic()
        if watch.loop is None:
            due = watch.hard_deadline is not None and now >= watch.hard_deadline
            if due and now >= watch.next_interrupt:
                watch.next_interrupt = now + watch.block_s
                frame = sys._current_frames().get(watch.thread_id)
                stack = "".join(traceback.format_stack(frame)[-_MAX_FRAMES:])
                if _backend_call(frame) is None:  # in the check's own code
                    message = f"{NOT_CONCLUDED}: {watch.message}; {_SLOW}"
                    stopped: CheckTimeout = CheckOutOfTime(f"{message}\nstack:\n{stack}")
                else:
                    stopped = CheckTimeout(f"{watch.message}\nstack when it was stopped:\n{stack}")
                self._interrupt(watch, stopped)
            return
        if watch.answered == watch.sent:
            # Answered (after a block too: the guard is ending the operation, unless a
            # task of the backend blocks the loop again first, so keep watching).
            _ping(watch, watch.loop, now)
            return
        if watch.blocked is None and now - watch.sent_at >= _POLL_S:
            frame = sys._current_frames().get(watch.thread_id)
            if _runs_hypothesis(frame):
                call = _backend_call(frame, in_example=True)
                if call is not watch.call:
                    watch.call, watch.call_since = call, now
                if watch.deadline is None or now < watch.deadline:
                    # The check runs a synchronous hypothesis test in the loop: kit code
                    # that may take long; only the guard's deadline stops it, and the
                    # time it takes does not count towards a block of the code after it.
                    watch.sent_at = now
                    return
        if now - watch.sent_at < watch.block_s:
            return
        if watch.blocked is None:
            frame = sys._current_frames().get(watch.thread_id)
            stack = _blocked_stack(frame)
            if _runs_hypothesis(frame):
                # Past the deadline in the check's own run: a block of the backend's only
                # if one call of it has kept the loop that long.
                call = _backend_call(frame, in_example=True)
                watch.own_time = (
                    call is None or call is not watch.call or now - watch.call_since < watch.block_s
                )
            watch.blocked_for = now - watch.sent_at
            watch.blocked = stack  # last: the guard reads it first
            if watch.on_blocked is not None:
                with contextlib.suppress(RuntimeError):
                    watch.loop.call_soon_threadsafe(watch.on_blocked)
        if now >= watch.next_interrupt:
            watch.next_interrupt = now + 0.2
            self._interrupt(watch, LoopBlocked())

    def _tick_between_guards(self, watch: _Watch, now: float) -> None:
        """The check's deadline watch, while no guard runs: is the last guard's loop,
        still running, blocked by a task the backend left behind?"""
        loop = _last_loop() if _last_loop is not None else None
        if loop is None or not loop.is_running() or watch.blocked is not None:
            watch.answered = watch.sent
            return
        if watch.answered == watch.sent:
            _ping(watch, loop, now)
            return
        if now - watch.sent_at < watch.block_s:
            return
        frame = sys._current_frames().get(watch.thread_id)
        if _runs_hypothesis(frame):  # kit code: only the deadline stops it
            watch.sent_at = now
            return
        if now >= watch.next_interrupt:
            watch.next_interrupt = now + 0.2
            watch.blocked_for = now - watch.sent_at
            watch.blocked = _blocked_stack(frame)
            self._interrupt(watch, LoopBlocked())

    def _interrupt(self, watch: _Watch, exc: BaseException) -> None:
        with self._lock:  # never for a guard that has ended
            if watch not in self._watches:
                return
            watch.pending = exc
            if watch.uses_signal and _INTERRUPT_SIGNAL is not None:
                signal.pthread_kill(watch.thread_id, _INTERRUPT_SIGNAL)
                return
            if watch.loop is None or not _safe_from_outside(watch):
                return
            watch.pending = None
            set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
            tid = ctypes.c_ulong(watch.thread_id)
            if set_async_exc(tid, ctypes.py_object(LoopBlocked)) > 1:  # pragma: no cover
                set_async_exc(tid, None)


def _ping(watch: _Watch, loop: asyncio.AbstractEventLoop, now: float) -> None:
    """Ask ``loop`` to answer: the next ping of ``watch``, sent at ``now``."""
    watch.sent += 1
    watch.sent_at = now
    with contextlib.suppress(RuntimeError):  # the loop is closed
        loop.call_soon_threadsafe(watch.pong, watch.sent)


_WATCHDOG = _Watchdog()

#: Times the whole process was not scheduled (``time.monotonic()`` from, to), as the
#: watchdog saw them: it woke late from a short sleep while the process used little CPU.
_STALLS: collections.deque[tuple[float, float]] = collections.deque(maxlen=1024)


def _note_stall(due: float, woke: float, cpu_s: float) -> None:
    """The watchdog, due to wake at ``due``, woke at ``woke``, the process having used
    ``cpu_s`` of CPU meanwhile: over a poll late and idle most of that time, the process
    was stalled (a busy machine), not held by one of its threads (a C call keeping the GIL
    uses CPU)."""
    late = woke - due
    if late > _POLL_S and cpu_s < (late + _POLL_S) / 2:
        _STALLS.append((due + cpu_s, woke))  # less what it did run (all threads' CPU)


def stalled_s(since: float, until: float) -> float:
    """How long, between ``since`` and ``until`` (``time.monotonic()``), the process was
    not scheduled at all, as far as the watchdog saw (while a check runs): time that no
    backend could have used, so a deadline missed by less was missed by the machine."""
    return sum(max(0.0, min(until, end) - max(since, start)) for start, end in list(_STALLS))


@contextlib.contextmanager
def _watching(watch: _Watch | None) -> Iterator[None]:
    if watch is None:
        yield
        return
    _WATCHDOG.add(watch)
    try:
        yield
    finally:
        _WATCHDOG.remove(watch)


def _on_interrupt_signal(signum: int, frame: FrameType | None) -> None:
    watch = _WATCHDOG.pending_for(threading.get_ident())
    if watch is None:
        previous = _WATCHDOG.previous_handler()
        if callable(previous):
            previous(signum, frame)
        return
    if watch.loop is None:
        if _running_loop() is not None:
            # A guard on that loop decides; between guards, the deadline watch raises a
            # block inside the callback that blocks (a task of the backend), not elsewhere.
            if not isinstance(watch.pending, LoopBlocked) or not _in_callback(frame):
                return
            if watch.answered == watch.sent:
                watch.pending = None  # the loop answered meanwhile
                return
    elif watch.answered == watch.sent:
        watch.pending = None  # the loop answered meanwhile: it is not blocked any more
        return
    elif not _safe_to_raise(frame, watch):
        return  # the watchdog tries again shortly
    exc, watch.pending = watch.pending, None
    if exc is not None:
        if watch.loop is not None:
            task = asyncio.current_task()
            if task is not None:  # the guard reports the block: not "never retrieved"
                task.add_done_callback(_retrieve)
        raise exc


@functools.cache
def _hypothesis_dir() -> str:
    import hypothesis

    return os.path.dirname(hypothesis.__file__) + os.sep


def _runs_hypothesis(frame: FrameType | None) -> bool:
    """Whether the callback the loop runs is inside a hypothesis run (between ``frame``
    and the loop's ``Handle._run``)."""
    package = _hypothesis_dir()
    f = frame
    while f is not None and f.f_code is not _HANDLE_RUN:
        if f.f_code.co_filename.startswith(package):
            return True
        f = f.f_back
    return False


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _in_loop_machinery(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    return filename.startswith(_ASYNCIO_DIR) or filename == _SELECTORS_FILE


def _safe_to_raise(frame: FrameType | None, watch: _Watch) -> bool:
    """Whether raising in ``frame`` (the watched thread's) lands in a backend's callback.

    Only code run by a loop callback, below ``Handle._run`` (which, like a task's step,
    catches the exception), and not in asyncio itself nor in the guard's own task.
    """
    if _running_loop() is not watch.loop:
        return False
    task = asyncio.current_task()
    return (task is None or task is not watch.protected) and _in_callback(frame)


def _in_callback(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside a loop callback, outside asyncio's own code."""
    if frame is None or _in_loop_machinery(frame):
        return False
    f: FrameType | None = frame
    while f is not None:
        if f.f_code is _HANDLE_RUN:
            return True
        f = f.f_back
    return False


def _safe_from_outside(watch: _Watch) -> bool:
    """Like :func:`_safe_to_raise`, judged from the watchdog thread (no signal handler)."""
    if watch.loop is None:
        return False
    task = asyncio.current_task(watch.loop)
    if task is not None and task is watch.protected:
        return False
    return _in_callback(sys._current_frames().get(watch.thread_id))
