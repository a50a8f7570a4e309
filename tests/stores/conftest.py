"""Fixtures for the state store tests."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from stm_stores import InMemoryStateStore, SQLiteStateStore

StoreFactory = Callable[[], Any]

#: ``redis-fake``: ``stm_redis.RedisStateStore`` on an in-process fakeredis server.
HAVE_FAKEREDIS = all(importlib.util.find_spec(m) for m in ("redis", "fakeredis", "lupa"))
STORE_KINDS = [
    "memory",
    "sqlite-memory",
    "sqlite-file",
    pytest.param(
        "redis-fake",
        marks=pytest.mark.skipif(not HAVE_FAKEREDIS, reason="needs redis, fakeredis and lupa"),
    ),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=STORE_KINDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Make fresh, empty stores of one kind; SQLite stores are closed afterwards."""
    kind: str = request.param
    opened: list[SQLiteStateStore] = []

    server: Any = None
    if kind == "redis-fake":
        import fakeredis

        server = fakeredis.FakeServer()

    def make() -> Any:
        if kind == "memory":
            return InMemoryStateStore()
        if kind == "redis-fake":
            import fakeredis
            from stm_redis import RedisStateStore

            client = fakeredis.FakeAsyncRedis(server=server)
            return RedisStateStore(client, namespace=f"store-{uuid.uuid4().hex[:8]}")
        path = ":memory:" if kind == "sqlite-memory" else tmp_path / f"state-{len(opened)}.db"
        store = SQLiteStateStore(path)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(store_factory: StoreFactory) -> Any:
    """A fresh, empty store of each kind."""
    return store_factory()
