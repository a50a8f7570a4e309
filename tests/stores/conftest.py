"""Fixtures for the state store tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from stm_stores import InMemoryStateStore, SQLiteStateStore

StoreFactory = Callable[[], InMemoryStateStore | SQLiteStateStore]

STORE_KINDS = ["memory", "sqlite-memory", "sqlite-file"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=STORE_KINDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Make fresh, empty stores of one kind; SQLite stores are closed afterwards."""
    kind: str = request.param
    opened: list[SQLiteStateStore] = []

    def make() -> InMemoryStateStore | SQLiteStateStore:
        if kind == "memory":
            return InMemoryStateStore()
        path = ":memory:" if kind == "sqlite-memory" else tmp_path / f"state-{len(opened)}.db"
        store = SQLiteStateStore(path)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(store_factory: StoreFactory) -> InMemoryStateStore | SQLiteStateStore:
    """A fresh, empty store of each kind."""
    return store_factory()
