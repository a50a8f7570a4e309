"""Public fixtures of the conformance suite; registered when a backend is selected.

Checks are ``async def`` and run on asyncio through anyio's pytest plugin. One event loop
serves the whole session (the session-scoped provider lifespan keeps it open), so memories,
stores and the backend's own resources all live on the same loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import anyio
import pytest
from _pytest.outcomes import OutcomeException

from ._deadline import (
    AWAITED_FOREVER,
    CLOSE_TIMEOUT_S,
    DEADLOCK_S,
    CheckTimeout,
    MemoryMark,
    await_chain,
    coroutine_stack,
    kit_probe,
    leftover_tasks,
    note_operation,
    noting_callers,
    operating_on,
    run_guarded,
    settle_tasks,
    wait_owned,
    wait_scheduled,
)
from ._patience import patient
from ._session import active_backend
from .checks import memory_view
from .contract import MemoryKey, ShortTermMemoryConfig, Summarizer
from .provider import MemoryFactory, Provider
from .scenarios import Tracker, track
from .scripted import RecordingCallbacks, ScriptedSummarizer
from .store import KitStateStore

__all__ = [
    "ADD_TURN_LIMIT_S",
    "FLUSH_LIMIT_S",
    "CLOSE_TIMEOUT_S",
    "CheckedMemory",
    "PreconditionError",
    "MakeMemory",
    "anyio_backend",
    "fresh_key",
    "make_memory",
    "make_peer",
    "recording_callbacks",
    "scripted_summarizer",
    "stm_capabilities",
    "stm_provider",
    "stm_seed",
    "stm_store",
]


def _close_limit(config: pytest.Config) -> float | None:
    """:data:`CLOSE_TIMEOUT_S`, or ``--stm-timeout`` when shorter; ``None`` when that is 0."""
    timeout = float(config.getoption("stm_timeout", None) or 0)
    return min(CLOSE_TIMEOUT_S, timeout) if timeout > 0 else None


async def _bounded(coro: Awaitable[Any], seconds: float | None, what: str) -> Any:
    """``coro`` within ``seconds``; abandoned, failing, when it hangs or blocks the loop.

    With ``--stm-timeout 0`` (``seconds`` is ``None``) only a plain time limit applies,
    to closing: no watchdog, so that a debugger may stop in the backend.
    """
    if seconds is None:
        with anyio.fail_after(CLOSE_TIMEOUT_S):
            return await coro
    return await run_guarded(coro, seconds=seconds, what=what)


class MakeMemory(Protocol):
    """The ``make_memory`` / ``make_peer`` fixtures' factory."""

    def __call__(
        self,
        config: ShortTermMemoryConfig,
        *,
        key: MemoryKey | None = None,
        summarizer: Summarizer | None = None,
    ) -> Awaitable[Any]:
        """Create a memory; the fixture closes it at teardown."""
        ...


def fresh_key() -> MemoryKey:
    """A key no other memory uses (unique across runs, for backends with shared storage)."""
    return MemoryKey("stm-conformance", "check", uuid.uuid4().hex)


#: How long ``add_turn`` may take, under ``rolling_summary`` or while the memory's own
#: callbacks run, before the check blames WM-001 or CB-004 rather than its own requirement
#: (times ``--stm-patience``, as every wait below).
ADD_TURN_LIMIT_S = 1.0
#: How long ``flush`` may take while no summarizer call is held before the check blames
#: WM-008 (a call hangs) or WM-007 (it waits for turns no call will cover).
FLUSH_LIMIT_S = 4.0


def _add_turn_limit() -> float:
    """:data:`ADD_TURN_LIMIT_S` scaled by ``--stm-patience``, never below the deadlock probe."""
    return max(patient(ADD_TURN_LIMIT_S), DEADLOCK_S)


class PreconditionError(OutcomeException):
    """A precondition of another requirement broke (the message opens with its ID).

    A pytest outcome, not an ``AssertionError`` (nor ``pytest.fail``'s ``Failed``): it ends
    the check at once. Hypothesis would otherwise shrink on it, and every example it tries
    would wait out the limit again.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, pytrace=True)


class CheckedMemory:
    """A backend's memory as ``make_memory`` hands it to checks: every attribute is the
    backend's own, but two calls carry the preconditions of other requirements, so a check
    that trips on them blames the requirement that broke rather than its own:

    - ``add_turn`` that does not return within ``ADD_TURN_LIMIT_S`` while one of the
      memory's own callbacks is still running: CB-004; else, under ``rolling_summary``:
      WM-001 (nothing else in ``add_turn`` may take that long), unless other ``add_turn``
      calls of the memory ended meanwhile (it waits its turn behind them, which CON-001
      allows, and gets the limit again); after it, the window
      (BUD-003) and the token limit (BUD-001) must hold, see
      :func:`~stm_conformance.checks.memory_view`;
    - ``flush`` that returns with a turn still pending that was pending when it was called,
      the memory not degraded: WM-007; that does not return within ``FLUSH_LIMIT_S`` while
      no summarizer call is held: WM-008 if a call hangs (no timeout), HLT-004 if the
      memory stays in RETRY with calls still coming, HLT-002 if it stays in RETRY without
      retrying, else WM-007.

    And ``add_turn``, ``flush``, ``get_llm_context`` and ``estimate_tokens`` raising, once a
    call of the kit's summarizer has failed or while the memory is not HEALTHY, anything
    but what callers are told to expect (from ``add_turn``: the provider's
    ``budget_exceeded_error``, ``ValueError``, ``TypeError``; from the others: nothing):
    HLT-008, the summarizer's failure reached a caller, whatever the check is about.

    A task that one of its async methods (``add_turn``, ``flush``, ``afrom_dict``,
    ``persist``, ``aclose`` ...) started (or one such a task started) and that raises,
    unretrieved, once ``aclose()`` has been called: CON-003, whichever check it surfaces
    in (:class:`~stm_conformance._deadline.LeftoverTaskError`).
    """

    def __init__(
        self,
        memory: Any,
        config: ShortTermMemoryConfig,
        summarizer: Any = None,
        tracker: Tracker | None = None,
        expected: tuple[type[BaseException], ...] = (ValueError, TypeError),
        mark: MemoryMark | None = None,
    ) -> None:
        self.__dict__["_stm_memory"] = memory
        self.__dict__["_stm_config"] = config
        #: What the memory's calls may raise to a caller (HLT-008 blames anything else).
        self.__dict__["_stm_expected"] = expected
        #: Notes the scenarios the check exercises (``stm_conformance.scenarios``).
        self.__dict__["_stm_tracker"] = tracker
        #: The memory's summarizer, when it is a ScriptedSummarizer the kit can watch.
        self.__dict__["_stm_summarizer"] = (
            summarizer if isinstance(summarizer, ScriptedSummarizer) else None
        )
        #: How many ``add_turn`` calls through this wrapper have ended.
        self.__dict__["_stm_adds_ended"] = 0
        #: Noted on the tasks its async methods start, and closed when ``aclose()`` is
        #: called: a task of the memory that raises after that is blamed on CON-003.
        self.__dict__["_stm_mark"] = mark if mark is not None else MemoryMark()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._stm_memory, name)
        if name == "aclose":
            value = _marking_closed(value, self._stm_mark)
        elif inspect.iscoroutinefunction(value):
            value = _operating(value, self._stm_mark)
        tracker = self._stm_tracker
        return value if tracker is None else tracker.wrap(name, value)

    async def add_turn(self, turn: Any) -> None:
        """The backend's ``add_turn``; WM-001 if it waits on a held summarizer call."""
        tracker = self._stm_tracker
        if tracker is not None:
            tracker.before("add_turn", (turn,))
        with operating_on(self._stm_mark):
            task = asyncio.ensure_future(self._stm_memory.add_turn(turn))
        task.add_done_callback(self._add_ended)
        note_operation(task)
        if not await wait_owned(task, DEADLOCK_S):
            blocked_on = self._blocked_on(task)
            rest = _add_turn_limit() - DEADLOCK_S
            while blocked_on is None:
                ended = self._stm_adds_ended
                if await wait_scheduled(task, rest):
                    break
                if self._stm_adds_ended > ended:
                    # Queued behind other add_turn calls that do end (a memory may take
                    # them one at a time): slow on a loaded machine, not waiting on
                    # summarization. The limit starts again.
                    rest = _add_turn_limit()
                    continue
                blocked_on = self._blocked_on(task, waited=True)
                break
            if blocked_on is not None:
                stack = coroutine_stack(task)  # where it waits, before cancelling it
                task.cancel()
                raise PreconditionError(f"{blocked_on}\n{stack}")
        try:
            await task  # slow for another reason: the check's own limits apply
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the check itself is being cancelled
            # The memory cancelled work of its own that add_turn awaited: raised on, it
            # would end the check as cancelled and close the test runner's loop with it.
            raise AssertionError(
                "add_turn() raised CancelledError though nothing cancelled its caller"
            ) from None
        except Exception as exc:
            if tracker is not None:
                tracker.rejected()
            self._failure_reached("add_turn", exc)
            raise
        await memory_view(self)  # the window and the budget hold after every turn

    async def get_llm_context(self) -> Any:
        """The backend's ``get_llm_context``; HLT-008 if it raises after a failed call."""
        try:
            return await self.__getattr__("get_llm_context")()
        except Exception as exc:
            self._failure_reached("get_llm_context", exc)
            raise

    def estimate_tokens(self) -> Any:
        """The backend's ``estimate_tokens``; HLT-008 if it raises after a failed call."""
        try:
            return self.__getattr__("estimate_tokens")()
        except Exception as exc:
            self._failure_reached("estimate_tokens", exc)
            raise

    def _failure_reached(self, call: str, exc: Exception) -> None:
        """HLT-008 when ``exc`` is no error a caller expects and the summarizer failed: a
        call of the kit's summarizer failed, or the memory's health shows a failure (its
        output refused, say)."""
        # Bad input and the budget's refusal are add_turn's to raise; the other calls take
        # no input, so nothing they raise is for a caller to expect.
        if call == "add_turn" and isinstance(exc, self._stm_expected):
            return
        summarizer = self._stm_summarizer
        failed = summarizer.failed if summarizer is not None else 0
        try:
            health = str(self._stm_memory.health.value)
        except Exception:  # the health itself is another requirement's business
            health = "healthy"
        if failed:
            after = f"after {failed} failed summarizer call(s)"
        elif health != "healthy":
            after = f"in health {health!r} (a summarizer call failed or its output was refused)"
        else:
            return
        raise PreconditionError(
            f"HLT-008: {call}() raised {type(exc).__name__}: {exc} {after}: summarizer "
            "failures must never reach callers"
        ) from exc

    def _add_ended(self, _: asyncio.Future[Any]) -> None:
        self.__dict__["_stm_adds_ended"] += 1

    def _blocked_on(self, task: asyncio.Task[Any], *, waited: bool = False) -> str | None:
        """Why ``add_turn`` is stuck: awaiting the summarizer (WM-001) or one of its
        callbacks (CB-004), seen in its await chain; after ``ADD_TURN_LIMIT_S`` under
        ``rolling_summary``, summarizing work it waits for out of sight (WM-001)."""
        stuck = kit_probe(await_chain(task))
        if stuck is not None:
            rule = "CB-004" if "callback" in stuck.why else "WM-001"
            return f"{rule}: add_turn did not return ({AWAITED_FOREVER}): {stuck.why}"
        if waited and self._stm_config.strategy == "rolling_summary":
            return (
                f"WM-001: add_turn did not return within {_add_turn_limit():g}s under "
                "rolling_summary: it waits for summarization (a retry backoff, a worker)"
            )
        return None

    def _stuck_flush(self, summarizer: ScriptedSummarizer, calling: bool) -> str:
        """Why ``flush`` did not return within ``FLUSH_LIMIT_S``, no call being held."""
        waited = f"flush() did not return within {patient(FLUSH_LIMIT_S):g}s"
        # A call hanging right now is no fault while it is younger than the timeout (and
        # the loop's lag): a memory retrying hung calls forever has one in flight at times.
        timeout = self._stm_config.summarizer_timeout_s
        overdue = 0.0 if timeout is None else timeout + max(DEADLOCK_S, patient(DEADLOCK_S))
        if summarizer.hanging and summarizer.longest_hang_s > overdue:
            return (
                f"WM-008: {waited} while a summarizer call hangs "
                f"({summarizer.longest_hang_s:.1f}s; summarizer_timeout_s={timeout}): "
                "it must time out"
            )
        if str(self._stm_memory.health.value) == "retry":
            if calling:  # failing calls keep coming: retries never run out
                return f"HLT-004: {waited}: the memory keeps retrying and never degrades"
            return f"HLT-002: {waited}: the memory stays in RETRY without retrying by itself"
        return f"WM-007: {waited} with no call held or hanging: it waits for turns no call covers"

    async def flush(self) -> None:
        """The backend's ``flush``; WM-007 if it returns before the pending turns are in."""
        before = _pending_users(await self._stm_memory.get_llm_context())
        if self._stm_tracker is not None:
            self._stm_tracker.before("flush", ())
        with operating_on(self._stm_mark):
            task = asyncio.ensure_future(self._stm_memory.flush())
        note_operation(task)
        while not task.done():
            summarizer = self._stm_summarizer
            calls = len(summarizer.calls) if summarizer is not None else 0
            await wait_scheduled(task, patient(FLUSH_LIMIT_S))
            if task.done() or summarizer is None or summarizer.waiting:
                continue  # a held or unknown summarizer: the check's own limits apply
            task.cancel()
            raise PreconditionError(self._stuck_flush(summarizer, len(summarizer.calls) > calls))
        try:
            task.result()
        except Exception as exc:
            self._failure_reached("flush", exc)
            raise
        if not before or str(self._stm_memory.health.value) in ("degraded", "recovering"):
            return
        still = before & _pending_users(await self._stm_memory.get_llm_context())
        if still:
            raise AssertionError(
                f"WM-007: flush() returned while turns pending when it was called are "
                f"still pending and the memory is not degraded: {sorted(still)}"
            )


def _pending_users(context: Any) -> set[str]:
    inner = dict(context).get("conversation_memory") or {}
    return {str(t.get("user")) for t in inner.get("pending_turns") or [] if isinstance(t, dict)}


def _callers_errors(provider: Provider) -> tuple[type[BaseException], ...]:
    """What a memory's calls may raise to a caller: bad input, and the budget's refusal."""
    refused = provider.budget_exceeded_error
    return (ValueError, TypeError, *(refused if isinstance(refused, tuple) else (refused,)))


def _marking_closed(aclose: Callable[[], Awaitable[None]], mark: MemoryMark) -> Any:
    """The memory's ``aclose``, noting on ``mark`` that it was called (and on the tasks it
    starts, as :func:`_operating` does)."""

    @functools.wraps(aclose)
    async def close() -> None:
        mark.closed = True
        with operating_on(mark):
            await aclose()

    return close


def _operating(method: Callable[..., Awaitable[Any]], mark: MemoryMark) -> Any:
    """An async method of the memory whose calls note ``mark`` on the tasks they start: one
    that raises, unretrieved, after ``aclose()`` is blamed on CON-003. (Made at every
    access of the method, ``get_llm_context``'s after every turn: no ``functools.wraps``,
    which costs fifteen times the closure.)"""

    async def call(*args: Any, **kwargs: Any) -> Any:
        with operating_on(mark):
            return await method(*args, **kwargs)

    return call


class _Memories:
    """Creates memories through one provider factory and closes them all at the end."""

    def __init__(
        self,
        create: MemoryFactory,
        close: Callable[[Any], Awaitable[None]],
        limit: float | None,
        expected: tuple[type[BaseException], ...],
    ) -> None:
        self._create = create
        self._close = close
        self._limit = limit
        self._expected = expected
        self._created: list[tuple[Any, MemoryMark]] = []

    async def make(
        self,
        config: ShortTermMemoryConfig,
        *,
        key: MemoryKey | None = None,
        summarizer: Summarizer | None = None,
    ) -> Any:
        summarizer = ScriptedSummarizer() if summarizer is None else summarizer
        tracker = track(config)
        given = noting_callers(summarizer)
        memory = await self._create(
            config,
            fresh_key() if key is None else key,
            given if tracker is None else tracker.summarizer(given),
        )
        mark = MemoryMark()
        self._created.append((memory, mark))
        if tracker is not None:
            tracker.attach(memory)
        return CheckedMemory(memory, config, summarizer, tracker, self._expected, mark)

    async def close_all(self) -> None:
        failures: list[str] = []
        first: BaseException | None = None
        while self._created:
            memory, mark = self._created.pop()
            mark.closed = True
            try:
                await _bounded(self._close(memory), self._limit, "closing a memory at teardown")
            except (Exception, CheckTimeout) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                first = first or exc
        if failures:
            raise RuntimeError(
                f"closing {len(failures)} memory(ies) failed: {'; '.join(failures)}"
            ) from first


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Checks run on asyncio."""
    return "asyncio"


@pytest.fixture(scope="session")
def stm_provider(pytestconfig: pytest.Config) -> Provider:
    """The provider of the backend under test."""
    return active_backend(pytestconfig).provider


@pytest.fixture(scope="session")
def stm_seed(pytestconfig: pytest.Config) -> int | None:
    """The run's seed (``--stm-seed``); ``None`` when the profile is derandomized."""
    from ._session import PLUGIN_NAME

    plugin = pytestconfig.pluginmanager.get_plugin(PLUGIN_NAME)
    return getattr(plugin, "seed", None)


@pytest.fixture(scope="session")
def stm_capabilities(stm_provider: Provider) -> frozenset[str]:
    """The capabilities the backend declares."""
    return stm_provider.capabilities


@pytest.fixture(scope="session", autouse=True)
async def _stm_lifespan(stm_provider: Provider, anyio_backend: str) -> AsyncIterator[None]:
    """Run the provider's lifespan around the session (and keep one event loop open)."""
    lifespan: contextlib.AbstractAsyncContextManager[Any] = (
        contextlib.nullcontext() if stm_provider.lifespan is None else stm_provider.lifespan()
    )
    try:
        async with lifespan:
            yield
    finally:
        # Tasks the checks left behind end before the event loop does: its shutdown would
        # wait forever for one that ignores cancellation.
        await settle_tasks(leftover_tasks())


@pytest.fixture
async def make_memory(
    stm_provider: Provider, anyio_backend: str, pytestconfig: pytest.Config
) -> AsyncIterator[MakeMemory]:
    """``await make_memory(config, *, key=None, summarizer=None)`` -> a fresh memory.

    The default key is new for every call and the default summarizer a fresh
    :class:`~stm_conformance.scripted.ScriptedSummarizer`; the backend receives it wrapped
    in a function that notes which tasks call it (so that a check stuck in ``add_turn``
    waiting for the summarizer is told apart quickly). Every memory made is closed at
    teardown (``Provider.close``, else ``aclose()``) on the check's event loop, each within
    :data:`CLOSE_TIMEOUT_S` (or ``--stm-timeout`` when shorter).
    """
    memories = _Memories(
        stm_provider.create,
        stm_provider.dispose,
        _close_limit(pytestconfig),
        _callers_errors(stm_provider),
    )
    try:
        yield memories.make
    finally:
        await memories.close_all()


@pytest.fixture
async def make_peer(
    stm_provider: Provider, anyio_backend: str, pytestconfig: pytest.Config
) -> AsyncIterator[MakeMemory]:
    """Like ``make_memory`` but through ``Provider.create_peer`` (skips when there is none)."""
    if stm_provider.create_peer is None:
        pytest.skip(
            "backend provides no create_peer (a second instance on one key is needed to "
            "check shared state)"
        )
    memories = _Memories(
        stm_provider.create_peer,
        stm_provider.dispose,
        _close_limit(pytestconfig),
        _callers_errors(stm_provider),
    )
    try:
        yield memories.make
    finally:
        await memories.close_all()


@pytest.fixture
async def stm_store(
    stm_provider: Provider, anyio_backend: str, pytestconfig: pytest.Config
) -> AsyncIterator[Any]:
    """A fresh store: ``await Provider.make_store()``, else a kit ``KitStateStore``.

    A store made by the provider is closed at teardown when it has ``aclose()``; making and
    closing it each have :data:`CLOSE_TIMEOUT_S` (or ``--stm-timeout`` when shorter).
    """
    if stm_provider.make_store is None:
        yield KitStateStore()
        return
    limit = _close_limit(pytestconfig)
    making = stm_provider.make_store()
    store = await (making if limit is None else _bounded(making, limit, "Provider.make_store()"))
    try:
        yield store
    finally:
        aclose = getattr(store, "aclose", None)
        if aclose is not None:
            await _bounded(aclose(), limit, "closing a store at teardown")


@pytest.fixture
def scripted_summarizer() -> ScriptedSummarizer:
    """A fresh :class:`~stm_conformance.scripted.ScriptedSummarizer`."""
    return ScriptedSummarizer()


@pytest.fixture
def recording_callbacks() -> RecordingCallbacks:
    """Fresh :class:`~stm_conformance.scripted.RecordingCallbacks`."""
    return RecordingCallbacks()
