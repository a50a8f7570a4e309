"""Faults on a real ``redis-server``: a restart mid-run and ``SCRIPT FLUSH``."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from redis.asyncio import Redis
from stm_redis import RedisShortTermMemory, RedisUnavailableError
from stm_redis.server import RedisServer

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
