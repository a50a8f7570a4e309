"""Public fixtures of the conformance suite; registered when a backend is selected.

Checks are ``async def`` and run on asyncio through anyio's pytest plugin. One event loop
serves the whole session (the session-scoped provider lifespan keeps it open), so memories,
stores and the backend's own resources all live on the same loop.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import anyio
import pytest

from ._session import active_backend
from .contract import MemoryKey, ShortTermMemoryConfig, Summarizer
from .provider import MemoryFactory, Provider
from .scripted import RecordingCallbacks, ScriptedSummarizer
from .store import KitStateStore

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
    "stm_seed",
    "stm_store",
]

#: Longest a provider may take to close one memory or store at teardown.
CLOSE_TIMEOUT_S = 10.0


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

    def __init__(self, create: MemoryFactory, close: Callable[[Any], Awaitable[None]]) -> None:
        self._create = create
        self._close = close
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
            ScriptedSummarizer() if summarizer is None else summarizer,
        )
        self._created.append(memory)
        return memory

    async def close_all(self) -> None:
        failures: list[str] = []
        first: BaseException | None = None
        while self._created:
            memory = self._created.pop()
            try:
                with anyio.fail_after(CLOSE_TIMEOUT_S):
                    await self._close(memory)
            except Exception as exc:
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
    if stm_provider.lifespan is None:
        yield
        return
    async with stm_provider.lifespan():
        yield


@pytest.fixture
async def make_memory(stm_provider: Provider, anyio_backend: str) -> AsyncIterator[MakeMemory]:
    """``await make_memory(config, *, key=None, summarizer=None)`` -> a fresh memory.

    The default key is new for every call and the default summarizer a fresh
    :class:`~stm_conformance.scripted.ScriptedSummarizer`. Every memory made is closed at
    teardown (``Provider.close``, else ``aclose()``) on the check's event loop.
    """
    memories = _Memories(stm_provider.create, stm_provider.dispose)
    try:
        yield memories.make
    finally:
        await memories.close_all()


@pytest.fixture
async def make_peer(stm_provider: Provider, anyio_backend: str) -> AsyncIterator[MakeMemory]:
    """Like ``make_memory`` but through ``Provider.create_peer`` (skips when there is none)."""
    if stm_provider.create_peer is None:
        pytest.skip(
            "backend provides no create_peer (a second instance on one key is needed to "
            "check shared state)"
        )
    memories = _Memories(stm_provider.create_peer, stm_provider.dispose)
    try:
        yield memories.make
    finally:
        await memories.close_all()


@pytest.fixture
async def stm_store(stm_provider: Provider, anyio_backend: str) -> AsyncIterator[Any]:
    """A fresh store: ``await Provider.make_store()``, else a kit ``KitStateStore``.

    A store made by the provider is closed at teardown when it has ``aclose()``.
    """
    if stm_provider.make_store is None:
        yield KitStateStore()
        return
    store = await stm_provider.make_store()
    try:
        yield store
    finally:
        aclose = getattr(store, "aclose", None)
        if aclose is not None:
            with anyio.fail_after(CLOSE_TIMEOUT_S):
                await aclose()


@pytest.fixture
def scripted_summarizer() -> ScriptedSummarizer:
    """A fresh :class:`~stm_conformance.scripted.ScriptedSummarizer`."""
    return ScriptedSummarizer()


@pytest.fixture
def recording_callbacks() -> RecordingCallbacks:
    """Fresh :class:`~stm_conformance.scripted.RecordingCallbacks`."""
    return RecordingCallbacks()
