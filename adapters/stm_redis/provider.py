"""Conformance backends ``redis`` (a real server) and ``fakeredis`` (in-process).

``pytest --stm-backend=redis`` uses the server at ``$STM_REDIS_URL``; without it, the run
starts its own ``redis-server`` on a free loopback port and stops it afterwards.
``pytest --stm-backend=fakeredis`` needs ``fakeredis`` with Lua (``lupa``) installed.

Each run writes under a fresh namespace ``stm-conformance:<run id>``; on an external server
its keys are deleted at the end (and expire after an hour regardless). Every memory has its
own clients (checks may run memories on their own event loops; a synchronous one makes
``from_dict`` write before it returns), and ``create_peer`` gives a second instance over a
second connection.

The suite's model is that ``create`` makes a *fresh* memory, even on a key used before;
a shared backend would instead see the earlier memory's state. So each ``create`` on a key
opens a new generation ``g<n>`` of the namespace (keys created in the same generation still
share one namespace, which is what the key-isolation checks exercise), and ``create_peer``
joins the newest generation of its key.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from redis import Redis as SyncRedis
from redis.asyncio import Redis

from reference_impl import (
    MemoryIsolation,
    MemoryKey,
    ShortTermMemoryConfig,
    resolve_memory_key,
)
from stm_conformance.capabilities import CAPABILITIES
from stm_conformance.provider import Provider

from .memory import RedisShortTermMemory
from .server import RedisServer
from .store import RedisStateStore

__all__ = ["URL_ENV", "fakeredis_provider", "make_provider", "redis_provider"]

#: Environment variable naming the server of ``--stm-backend=redis``.
URL_ENV = "STM_REDIS_URL"

ClientFactory = Callable[[], tuple[Redis, SyncRedis]]


def _resolve_key(
    isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any
) -> MemoryKey | None:
    return resolve_memory_key(isolation, memory_key=explicit, tool_context=tool_context)


def make_provider(
    name: str,
    clients: Callable[[], ClientFactory],
    lifespan: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None,
    *,
    namespace: str | None = None,
    memory_class: type[RedisShortTermMemory] = RedisShortTermMemory,
) -> Provider:
    """A provider whose memories get their clients from ``clients()()``.

    ``clients`` is called when a memory is made (after ``lifespan`` started), so the
    lifespan may decide where the server is. ``memory_class`` makes the memories (a
    subclass changing one behaviour, such as the kit's broken backends).
    """
    run = namespace or f"stm-conformance:{uuid.uuid4().hex[:12]}"
    generations: dict[MemoryKey, int] = {}

    def build(config: ShortTermMemoryConfig, key: MemoryKey, summarizer: Any, gen: int) -> Any:
        client, sync_client = clients()()
        return memory_class(
            client,
            sync_client=sync_client,
            config=config,
            key=key,
            summarizer=summarizer,
            namespace=f"{run}:g{gen}",
            ttl_s=3600.0,
            poll_interval_s=0.005,
            owns_client=True,
        )

    async def create(config: ShortTermMemoryConfig, key: MemoryKey, summarizer: Any) -> Any:
        gen = generations.get(key, -1) + 1
        generations[key] = gen
        return build(config, key, summarizer, gen)

    async def create_peer(config: ShortTermMemoryConfig, key: MemoryKey, summarizer: Any) -> Any:
        gen = generations.setdefault(key, 0)
        return build(config, key, summarizer, gen)

    async def make_store() -> Any:
        client, sync_client = clients()()
        sync_client.close()
        return RedisStateStore(
            client, namespace=f"{run}:store:{uuid.uuid4().hex[:8]}", owns_client=True
        )

    return Provider(
        name=name,
        create=create,
        create_peer=create_peer,
        capabilities=CAPABILITIES,
        make_store=make_store,
        lifespan=lifespan,
        resolve_key=_resolve_key,
    )


def redis_provider() -> Provider:
    """``--stm-backend=redis``: ``$STM_REDIS_URL``, else a ``redis-server`` of its own."""
    run = f"stm-conformance:{uuid.uuid4().hex[:12]}"
    where: dict[str, str] = {}

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        url = os.environ.get(URL_ENV)
        if url:
            where["url"] = url
            try:
                yield
            finally:
                client: Redis = Redis.from_url(url)
                try:
                    keys = [k async for k in client.scan_iter(match=f"{run}:*", count=1000)]
                    for start in range(0, len(keys), 500):
                        await client.unlink(*keys[start : start + 500])
                finally:
                    await client.aclose()
            return
        server = RedisServer()
        server.start()
        where["url"] = server.url
        try:
            yield
        finally:
            server.close()

    def clients() -> ClientFactory:
        url = where.get("url") or os.environ.get(URL_ENV)
        if not url:
            raise RuntimeError(f"no Redis server: set {URL_ENV} or run inside the lifespan")
        return lambda: (Redis.from_url(url), SyncRedis.from_url(url))

    return make_provider("redis", clients, lifespan, namespace=run)


def fakeredis_provider(
    name: str = "fakeredis", memory_class: type[RedisShortTermMemory] = RedisShortTermMemory
) -> Provider:
    """``--stm-backend=fakeredis``: an in-process server shared by all memories of the run
    (named ``name``, its memories made by ``memory_class``)."""
    import fakeredis

    server = fakeredis.FakeServer()

    def clients() -> ClientFactory:
        return lambda: (
            fakeredis.FakeAsyncRedis(server=server),
            fakeredis.FakeRedis(server=server),
        )

    return make_provider(name, clients, memory_class=memory_class)
