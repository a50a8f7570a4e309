"""Fixtures of the Redis backend tests: fakeredis clients and a real ``redis-server``."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from redis import Redis as SyncRedis  # noqa: E402
from redis.asyncio import Redis  # noqa: E402
from stm_redis import RedisShortTermMemory  # noqa: E402
from stm_redis.server import RedisServer  # noqa: E402

from reference_impl import MemoryKey, ShortTermMemoryConfig  # noqa: E402

MemoryFactory = Callable[..., RedisShortTermMemory]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake_server() -> Any:
    return fakeredis.FakeServer()


@pytest.fixture
def namespace() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def fake_memories(fake_server: Any, namespace: str) -> AsyncIterator[MemoryFactory]:
    """``make(config, key=..., summarizer=..., **options)``: memories on one fake server,
    each over its own connection; all closed at teardown."""
    made: list[RedisShortTermMemory] = []

    def make(
        config: ShortTermMemoryConfig,
        *,
        key: MemoryKey | None = None,
        summarizer: Any = None,
        **options: Any,
    ) -> RedisShortTermMemory:
        options.setdefault("namespace", namespace)
        options.setdefault("poll_interval_s", 0.005)
        options.setdefault("sync_client", fakeredis.FakeRedis(server=fake_server))
        memory = RedisShortTermMemory(
            fakeredis.FakeAsyncRedis(server=fake_server),
            config=config,
            key=key or MemoryKey("t", "u", "s"),
            summarizer=summarizer,
            owns_client=True,
            **options,
        )
        made.append(memory)
        return memory

    yield make
    for memory in made:
        await memory.aclose()


def _needs_redis_server() -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real ``redis-server`` on a free loopback port for the whole session."""
    _needs_redis_server()
    with RedisServer() as server:
        yield server


@pytest.fixture
def persistent_server() -> Iterator[RedisServer]:
    """A real server of its own with an fsync'd append-only file, for restart tests."""
    _needs_redis_server()
    with RedisServer(persistence=True) as server:
        yield server


@pytest.fixture
async def real_memories(redis_server: RedisServer, namespace: str) -> AsyncIterator[MemoryFactory]:
    """Like ``fake_memories``, on the real server (``client=``: a client of one's own)."""
    made: list[RedisShortTermMemory] = []

    def make(
        config: ShortTermMemoryConfig,
        *,
        key: MemoryKey | None = None,
        summarizer: Any = None,
        server: RedisServer | None = None,
        **options: Any,
    ) -> RedisShortTermMemory:
        url = (server or redis_server).url
        options.setdefault("namespace", namespace)
        options.setdefault("poll_interval_s", 0.005)
        options.setdefault("owns_client", True)
        memory = RedisShortTermMemory(
            options.pop("client", None) or Redis.from_url(url),
            sync_client=SyncRedis.from_url(url),
            config=config,
            key=key or MemoryKey("t", "u", "s"),
            summarizer=summarizer,
            **options,
        )
        made.append(memory)
        return memory

    yield make
    for memory in made:
        await memory.aclose()
