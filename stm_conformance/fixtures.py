"""Public fixtures of the conformance suite; registered when a backend is selected.

Checks are ``async def`` and run on asyncio through anyio's pytest plugin. One event loop
serves the whole session (the session-scoped provider lifespan keeps it open), so memories,
stores and the backend's own resources all live on the same loop.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import anyio
import pytest

from reference_impl.types import MemoryKey, ShortTermMemoryConfig, Summarizer

from ._deadline import (
    CLOSE_TIMEOUT_S,
    CheckTimeout,
    leftover_tasks,
    noting_callers,
    run_guarded,
    settle_tasks,
)
from ._session import active_backend
from .provider import MemoryFactory, Provider
from .scripted import RecordingCallbacks, ScriptedSummarizer

__all__ = [
    "CLOSE_TIMEOUT_S",
    "MakeMemory",
    "anyio_backend",
    "fresh_key",
    "make_memory",
    "make_peer",
    "recording_callbacks",
    "scripted_summarizer",
    "stm_capabilities",
    "stm_provider",
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


class _Memories:
    """Creates memories through one provider factory and closes them all at the end."""

    def __init__(
        self, create: MemoryFactory, close: Callable[[Any], Awaitable[None]], limit: float | None
    ) -> None:
        self._create = create
        self._close = close
        self._limit = limit
        self._created: list[Any] = []

    async def make(
        self,
        config: ShortTermMemoryConfig,
        *,
        key: MemoryKey | None = None,
        summarizer: Summarizer | None = None,
    ) -> Any:
        memory = await self._create(
            config,
            fresh_key() if key is None else key,
            noting_callers(ScriptedSummarizer() if summarizer is None else summarizer),
        )
        self._created.append(memory)
        return memory

    async def close_all(self) -> None:
        failures: list[str] = []
        first: BaseException | None = None
        while self._created:
            memory = self._created.pop()
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
    memories = _Memories(stm_provider.create, stm_provider.dispose, _close_limit(pytestconfig))
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
    memories = _Memories(stm_provider.create_peer, stm_provider.dispose, _close_limit(pytestconfig))
    try:
        yield memories.make
    finally:
        await memories.close_all()


@pytest.fixture
async def stm_store(
    stm_provider: Provider, anyio_backend: str, pytestconfig: pytest.Config
) -> AsyncIterator[Any]:
    """A fresh store: ``await Provider.make_store()``, else ``stm_stores.InMemoryStateStore()``.

    A store made by the provider is closed at teardown when it has ``aclose()``; making and
    closing it each have :data:`CLOSE_TIMEOUT_S` (or ``--stm-timeout`` when shorter).
    """
    if stm_provider.make_store is None:
        from stm_stores import InMemoryStateStore

        yield InMemoryStateStore()
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
