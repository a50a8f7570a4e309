"""Faults on a real ``redis-server``: a restart mid-run, ``SCRIPT FLUSH``, and a
cancellation that redis-py's socket send swallows."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis
from stm_redis import RedisShortTermMemory, RedisUnavailableError
from stm_redis import memory as stm_memory
from stm_redis.server import RedisServer
from stm_stores import InMemoryStateStore

from stm_conformance import ScriptedSummarizer
from stm_conformance.checks import config, turn, users

pytestmark = pytest.mark.anyio

MemoryFactory = Callable[..., RedisShortTermMemory]


async def test_a_restart_mid_run_loses_nothing_acknowledged(
    persistent_server: RedisServer, real_memories: MemoryFactory
) -> None:
    cfg = config("truncation", full_zone_turns=100, total_max_tokens=0)
    memory = real_memories(cfg, server=persistent_server)
    peer = real_memories(cfg, server=persistent_server)
    for i in range(20):
        await memory.add_turn(turn(i), turn_id=f"t{i}")
    persistent_server.stop()
    started = time.monotonic()
    for i in range(20, 23):
        with pytest.raises(RedisUnavailableError) as caught:
            await memory.add_turn(turn(i), turn_id=f"t{i}")
        assert caught.value.turn_id == f"t{i}" and caught.value.key == memory.redis_key
    with pytest.raises(RedisUnavailableError):
        await peer.get_llm_context()
    down = time.monotonic() - started
    persistent_server.start()
    for i in range(20, 23):  # the callers retry with the same turn ids
        await memory.add_turn(turn(i), turn_id=f"t{i}")
    await peer.add_turn(turn(23), turn_id="t23")
    view = await peer.get_llm_context()
    assert users(view["conversation_memory"]["recent_turns"]) == [f"u{i}" for i in range(24)]
    print(f"\n4 typed errors in {down:.2f}s while the server was down; nothing lost")


async def test_script_flush_mid_run_changes_nothing(
    redis_server: RedisServer, real_memories: MemoryFactory
) -> None:
    summarizer = ScriptedSummarizer()
    memory = real_memories(config(full_zone_turns=2), summarizer=summarizer)
    admin = Redis.from_url(redis_server.url)
    try:
        for i in range(10):
            await memory.add_turn(turn(i))
            if i % 3 == 0:
                await admin.script_flush()
        await memory.flush()
    finally:
        await admin.aclose()
    view = (await memory.get_llm_context())["conversation_memory"]
    sent = [u for call in summarizer.calls for u in users(call["turns"])]
    assert sent == [f"u{i}" for i in range(8)]
    assert users(view["recent_turns"]) == ["u8", "u9"]


@pytest.mark.parametrize("steps", [0, 1, 2])
async def test_a_cancellation_lost_in_the_client_still_ends_the_lease_renewals(
    real_memories: MemoryFactory, steps: int
) -> None:
    """redis-py sends a command through ``asyncio.wait_for`` (its socket timeout), which
    on CPython 3.11 swallows a cancellation arriving as the send completes. A worker that
    ran out of work cancels its lease renewer: cancelled while a renewal is sent, the
    renewer went on renewing forever, the worker waited for it, and no summarizer call
    could run on the session again (every later ``flush()`` hung; WM-007). The outcome's
    reply is held here until a renewal is on its way, ``steps`` loop steps more."""

    async def summarize(payload: Any) -> Any:
        await asyncio.sleep(0.01)
        return {"summary": ",".join(t["user"] for t in payload["turns"])}

    memory = real_memories(
        config(full_zone_turns=1), summarizer=summarize, lease_ttl_s=0.3, poll_interval_s=0.01
    )
    renewing, armed = asyncio.Event(), [True]
    real = memory._script

    async def aligned(lua: Any, args: Any, **kwargs: Any) -> Any:
        if lua is stm_memory._RENEW:
            renewing.set()
        outcome = lua is stm_memory._COMMIT and not kwargs.get("turn_id") and armed[0]
        if outcome:
            renewing.clear()
        reply = await real(lua, args, **kwargs)
        if outcome:
            armed[0] = False
            await renewing.wait()
            for _ in range(steps):
                await asyncio.sleep(0)
        return reply

    memory._script = aligned  # type: ignore[method-assign]
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await asyncio.wait_for(memory.flush(), 5)
    await asyncio.sleep(0.5)  # the worker ran out of work and ended its hold
    await memory.add_turn(turn(2))
    await asyncio.wait_for(memory.flush(), 5)  # another call runs: the lease was let go
    assert memory.to_dict()["summary"] == "u1"
    await asyncio.wait_for(memory.aclose(), 5)


@pytest.mark.parametrize("steps", [1, 2, 3])
async def test_aclose_releases_a_lease_its_cancelled_worker_was_taking(
    redis_server: RedisServer, real_memories: MemoryFactory, steps: int
) -> None:
    """``aclose()`` cancels a worker whose ``ACQUIRE`` may be on its way: the script runs
    on the server and takes the lease under a fence the worker never reads. The closed
    instance must not keep it, or every other instance waits out ``lease_ttl_s``."""

    async def summarizer(payload: Any) -> dict[str, str]:
        return {"summary": "s"}

    cfg = config(full_zone_turns=1)
    held = ScriptedSummarizer()
    held.hold()
    writer = real_memories(cfg, summarizer=held)
    await writer.add_turn(turn(0))
    await writer.add_turn(turn(1))
    await writer.aclose()  # u0 left pending, the lease free
    memory = real_memories(cfg, summarizer=summarizer, lease_ttl_s=30.0)
    await memory.get_llm_context()  # work waiting: its worker starts and asks for the lease
    for _ in range(steps):
        await asyncio.sleep(0)
    await memory.aclose()
    admin = Redis.from_url(redis_server.url)
    try:
        assert await admin.get(memory._keys.lease) is None
    finally:
        await admin.aclose()
    peer = real_memories(cfg, summarizer=summarizer)
    started = time.monotonic()
    await asyncio.wait_for(peer.flush(), 10)
    assert time.monotonic() - started < 5.0


async def test_aclose_waits_for_an_add_turn_on_the_wire_and_then_refuses_calls(
    redis_server: RedisServer, real_memories: MemoryFactory
) -> None:
    """CON-003: ``aclose()`` while an ``add_turn`` waits on a paused server. The call ends
    as it would have (the turn stored, no error) before the memory closes the client it
    owns under it; calls made after that raise ``RuntimeError`` without reaching Redis,
    and ``from_dict`` is refused rather than shown and never written."""
    cfg = config("truncation", full_zone_turns=5, total_max_tokens=0)
    memory = real_memories(cfg)
    await memory.add_turn(turn(0))
    admin = Redis.from_url(redis_server.url)
    try:
        await admin.execute_command("CLIENT", "PAUSE", "400", "WRITE")
        adding = asyncio.create_task(memory.add_turn(turn(1)))
        await asyncio.sleep(0.1)
        closing = asyncio.create_task(memory.aclose())
        await asyncio.sleep(0.1)
        assert not adding.done() and not closing.done(), "the server should still be paused"
        await adding
        await closing
    finally:
        await admin.aclose()
    sent: list[Any] = []

    async def record(*args: Any, **kwargs: Any) -> Any:
        sent.append(args)
        raise AssertionError("a closed memory sent a command")

    memory._client.execute_command = record  # type: ignore[method-assign]
    store = InMemoryStateStore()
    calls = {
        "add_turn": lambda: memory.add_turn(turn(2)),
        "get_llm_context": memory.get_llm_context,
        "clear": memory.clear,
        "turn_recorded": lambda: memory.turn_recorded("t1"),
        "persist": lambda: memory.persist(store, "k"),
        "hydrate": lambda: memory.hydrate(store, "k"),
    }
    for name, call in calls.items():
        with pytest.raises(RuntimeError, match=f"{name} on a closed memory"):
            await call()
    before = memory.to_dict()
    with pytest.raises(RuntimeError, match="from_dict on a closed memory"):
        memory.from_dict(before)
    assert memory.to_dict() == before
    await memory.flush()  # nothing to wait for: returns
    assert not sent and await store.load_memory_state("k") is None
    reader = real_memories(cfg)
    assert users((await reader.get_llm_context())["conversation_memory"]["recent_turns"]) == [
        "u0",
        "u1",
    ]


async def test_aclose_does_not_wait_for_a_server_that_stopped_answering(
    redis_server: RedisServer, real_memories: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CON-003: a call whose server never answers does not keep ``aclose()`` from
    returning: after ``CLOSE_GRACE_S`` it closes the client under the call, which then
    fails with a typed error."""
    monkeypatch.setattr(stm_memory, "CLOSE_GRACE_S", 0.2)
    memory = real_memories(config("truncation", full_zone_turns=5, total_max_tokens=0))
    await memory.add_turn(turn(0))
    admin = Redis.from_url(redis_server.url)
    try:
        # The pause holds every client, this one's UNPAUSE too: as short as will do.
        await admin.execute_command("CLIENT", "PAUSE", "1000", "ALL")
        reading = asyncio.create_task(memory.get_llm_context())
        await asyncio.sleep(0.05)
        started = time.monotonic()
        await memory.aclose()
        took = time.monotonic() - started
        with pytest.raises(RedisUnavailableError):
            await reading
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")
        await admin.aclose()
    assert 0.2 <= took < 0.9, f"aclose() took {took:.2f} s: it waited for the pause to end"


@pytest.mark.parametrize("owns_client", [True, False], ids=["owned", "not-owned"])
async def test_aclose_with_the_worker_and_a_save_under_way_does_not_wait_for_a_silent_server(
    redis_server: RedisServer,
    real_memories: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    owns_client: bool,
) -> None:
    """CON-003: the grace bounds everything ``aclose()`` waits on Redis for (a save under
    way, the worker releasing its lease), not only the calls under way: with the server
    paused, it returns after ``CLOSE_GRACE_S`` and leaves no task running, also with a
    client it does not own (which it cannot close under them). The save fails with an
    error, and the worker it stopped is not taken for one that crashed."""
    monkeypatch.setattr(stm_memory, "CLOSE_GRACE_S", 0.2)
    started = asyncio.Event()

    async def summarizer(payload: Any) -> dict[str, str]:
        started.set()
        await asyncio.sleep(30)
        return {"summary": "x"}

    client = Redis.from_url(redis_server.url, socket_timeout=None)
    memory = real_memories(
        config(full_zone_turns=1, summarizer_timeout_s=60),
        summarizer=summarizer,
        client=client,
        owns_client=owns_client,
    )
    for i in range(3):
        await memory.add_turn(turn(i))
    await asyncio.wait_for(started.wait(), 5)
    admin = Redis.from_url(redis_server.url)
    try:
        await admin.execute_command("CLIENT", "PAUSE", "1000", "ALL")
        saving = asyncio.create_task(memory.persist(InMemoryStateStore(), "k"))
        await asyncio.sleep(0.05)
        began = time.monotonic()
        await memory.aclose()
        took = time.monotonic() - began
        left = [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("stm-")]
        with pytest.raises((RedisUnavailableError, RuntimeError)):
            await saving
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")
        await admin.aclose()
        if not owns_client:
            await client.aclose()
    assert 0.2 <= took < 0.9, f"aclose() took {took:.2f} s: it waited for the pause to end"
    assert left == [], f"tasks of the memory running after aclose(): {left}"
    assert "summarizer worker crashed" not in caplog.text
