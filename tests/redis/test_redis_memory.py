"""The Redis backend on fakeredis: keys, round trips, idempotent turns, the lease, errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis import exceptions as redis_errors
from redis.crc import key_slot
from stm_redis import (
    RedisMemoryError,
    RedisShortTermMemory,
    RedisUnavailableError,
    SessionKeys,
    encode_memory_key,
)
from stm_redis import memory as stm_memory
from stm_redis.keys import check_namespace

from reference_impl import ConversationTurn, MemoryKey
from stm_conformance import ScriptedSummarizer
from stm_conformance.checks import config, turn, users

pytestmark = pytest.mark.anyio

MemoryFactory = Callable[..., RedisShortTermMemory]

PARTS = st.text(alphabet=st.sampled_from(["a", ":", "{", "}", "%", "3", "A", "é", "🦜"]))


@given(st.tuples(PARTS, PARTS, PARTS), st.tuples(PARTS, PARTS, PARTS))
def test_key_encoding_is_injective(a: tuple[str, str, str], b: tuple[str, str, str]) -> None:
    if a != b:
        assert encode_memory_key(MemoryKey(*a)) != encode_memory_key(MemoryKey(*b))


@given(st.tuples(PARTS, PARTS, PARTS))
def test_every_key_of_a_session_is_in_one_cluster_slot(parts: tuple[str, str, str]) -> None:
    keys = SessionKeys.for_key("ns:x", MemoryKey(*parts))
    assert len({key_slot(k.encode()) for k in keys.all()}) == 1
    tag = encode_memory_key(MemoryKey(*parts))
    assert "{" not in tag and "}" not in tag


@pytest.mark.parametrize("bad", ["", "a{b", "a}b"])
def test_namespace_with_braces_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        check_namespace(bad)


async def test_instances_on_one_key_share_one_memory(fake_memories: MemoryFactory) -> None:
    cfg = config("truncation", full_zone_turns=3)
    a, b = fake_memories(cfg), fake_memories(cfg)
    await a.add_turn(turn(1))
    await b.add_turn(turn(2))
    view = await a.get_llm_context()
    assert users(view["conversation_memory"]["recent_turns"]) == ["u1", "u2"]
    other = fake_memories(cfg, key=MemoryKey("t", "u", "other"))
    assert (await other.get_llm_context())["conversation_memory"]["recent_turns"] == []


async def test_add_turn_and_reading_are_one_round_trip_each(fake_memories: MemoryFactory) -> None:
    memory = fake_memories(config(full_zone_turns=2), summarizer=ScriptedSummarizer())
    # The first use of each script on a server sends it whole: one trip more.
    before = memory.round_trips
    await memory.get_llm_context()
    assert memory.round_trips - before == 2
    before = memory.round_trips
    await memory.add_turn(turn(0))
    assert memory.round_trips - before == 2
    # From then on the server has the scripts.
    before = memory.round_trips
    await memory.add_turn(turn(1))
    assert memory.round_trips - before == 1
    before = memory.round_trips
    await memory.get_llm_context()
    assert memory.round_trips - before == 1


async def test_a_retried_turn_is_recorded_once(fake_memories: MemoryFactory) -> None:
    a, b = fake_memories(config("truncation")), fake_memories(config("truncation"))
    await a.add_turn(turn(1), turn_id="turn-1")
    await b.add_turn(turn(1), turn_id="turn-1")  # another worker retrying the same turn
    await a.add_turn(turn(2), turn_id="turn-2")
    view = await b.get_llm_context()
    assert users(view["conversation_memory"]["recent_turns"]) == ["u1", "u2"]
    assert await a.turn_recorded("turn-1") and not await a.turn_recorded("turn-3")


async def test_a_turn_carrying_its_id_is_recorded_once(fake_memories: MemoryFactory) -> None:
    a, b = fake_memories(config("truncation")), fake_memories(config("truncation"))
    first = ConversationTurn("u1", "a1", turn_id="carried-1")
    await a.add_turn(first)
    await b.add_turn(first)  # another worker retrying the same turn, id and all
    await a.add_turn(ConversationTurn("u1", "a1"))  # no id: a new turn, same messages
    view = await b.get_llm_context()
    assert users(view["conversation_memory"]["recent_turns"]) == ["u1", "u1"]
    assert await a.turn_recorded("carried-1")
    assert [t.get("turn_id") for t in a.to_dict()["turns"]] == ["carried-1", None]


async def test_a_lost_reply_is_reported_and_safe_to_retry(fake_memories: MemoryFactory) -> None:
    memory = fake_memories(config("truncation"))
    await memory.add_turn(turn(0))
    client = memory._client
    real = client.execute_command
    commit_sha = stm_memory._COMMIT.sha

    async def lose_reply(*args: Any, **kwargs: Any) -> Any:
        reply = await real(*args, **kwargs)
        if args[:2] == (b"EVALSHA", commit_sha):  # the write lands, the reply is lost
            raise redis_errors.TimeoutError("Timeout reading from socket")
        return reply

    client.execute_command = lose_reply  # type: ignore[method-assign]
    with pytest.raises(RedisUnavailableError) as caught:
        await memory.add_turn(turn(1))
    error = caught.value
    assert error.recorded is None and error.turn_id and error.key == memory.redis_key
    assert memory.redis_key in str(error)
    client.execute_command = real  # type: ignore[method-assign]
    await memory.add_turn(turn(1), turn_id=error.turn_id)
    view = await memory.get_llm_context()
    assert users(view["conversation_memory"]["recent_turns"]) == ["u0", "u1"]


async def test_unreachable_server_gives_typed_errors_naming_the_key() -> None:
    from redis.asyncio import Redis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from stm_redis.server import free_port

    client = Redis(host="127.0.0.1", port=free_port(), retry=Retry(NoBackoff(), 0))
    memory = RedisShortTermMemory(
        client, config=config("truncation"), key=MemoryKey("t", "u", "s"), owns_client=True
    )
    try:
        with pytest.raises(RedisUnavailableError) as caught:
            await memory.add_turn(turn(1), turn_id="x")
        assert caught.value.recorded is False and caught.value.turn_id == "x"
        assert "stm:{t:u:s}:state" in str(caught.value)
        with pytest.raises(RedisUnavailableError):
            await memory.get_llm_context()
    finally:
        await memory.aclose()


async def test_writes_set_the_sliding_ttl(fake_memories: MemoryFactory, fake_server: Any) -> None:
    import fakeredis

    memory = fake_memories(config("truncation"), ttl_s=120)
    await memory.add_turn(turn(1), turn_id="a")
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    keys = SessionKeys.for_key(memory._keys.state.split(":{")[0], memory.key)
    for name in (keys.state, keys.ids):
        assert 110_000 < await client.pttl(name) <= 120_000
    await client.aclose()


async def test_clear_forgets_the_session(fake_memories: MemoryFactory) -> None:
    a, b = fake_memories(config("truncation")), fake_memories(config("truncation"))
    await a.add_turn(turn(1), turn_id="a")
    await b.clear()
    assert (await a.get_llm_context())["conversation_memory"]["recent_turns"] == []
    assert not await a.turn_recorded("a")
    await a.add_turn(turn(2))
    assert users((await b.get_llm_context())["conversation_memory"]["recent_turns"]) == ["u2"]


async def test_script_flush_changes_nothing(fake_memories: MemoryFactory, fake_server: Any) -> None:
    import fakeredis

    summarizer = ScriptedSummarizer()
    memory = fake_memories(config(full_zone_turns=2), summarizer=summarizer)
    for i in range(3):
        await memory.add_turn(turn(i))
    await memory.flush()
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    await client.script_flush()
    await client.aclose()
    for i in range(3, 6):
        await memory.add_turn(turn(i))
    await memory.flush()
    view = (await memory.get_llm_context())["conversation_memory"]
    assert users(view["recent_turns"]) == ["u4", "u5"]
    sent = [u for call in summarizer.calls for u in users(call["turns"])]
    assert sent == ["u0", "u1", "u2", "u3"]


async def test_one_summarizer_call_at_a_time_across_instances(
    fake_memories: MemoryFactory,
) -> None:
    summarizer = ScriptedSummarizer()
    cfg = config(full_zone_turns=1)
    a, b = fake_memories(cfg, summarizer=summarizer), fake_memories(cfg, summarizer=summarizer)
    summarizer.hold()
    await a.add_turn(turn(0))
    await a.add_turn(turn(1))
    await summarizer.wait_for_calls(1)
    for i in range(2, 6):
        await b.add_turn(turn(i))
    await asyncio.sleep(0.05)
    assert len(summarizer.calls) == 1, "a second call started while the first held the lease"
    summarizer.release()
    await b.flush()
    sent = [u for call in summarizer.calls for u in users(call["turns"])]
    assert sent == ["u0", "u1", "u2", "u3", "u4"]
    assert (await a.get_llm_context())["conversation_memory"]["summary"].count("user:u0") == 1


async def test_a_stale_lease_holder_cannot_install(fake_memories: MemoryFactory) -> None:
    """A holder whose lease expired and was taken over is fenced off: its summary is
    discarded and the turns it was sent are summarized once, by the new holder."""
    slow, fast = ScriptedSummarizer(), ScriptedSummarizer()
    cfg = config(full_zone_turns=1)
    a = fake_memories(cfg, summarizer=slow, lease_ttl_s=0.3)
    b = fake_memories(cfg, summarizer=fast, lease_ttl_s=0.3)
    slow.hold()
    a._renew = _never_renew  # type: ignore[method-assign]  # a holder that stalls
    await a.add_turn(turn(0))
    await a.add_turn(turn(1))
    await slow.wait_for_calls(1)
    await b.flush()  # waits for the lease to expire, then b summarizes
    assert [users(c["turns"]) for c in fast.calls] == [["u0"]]
    slow.release()
    await asyncio.sleep(0.1)
    view = (await b.get_llm_context())["conversation_memory"]
    assert view["summary"] == "user:u0", view


async def _never_renew(token: str, held_until: list[float]) -> None:
    del token, held_until
    await asyncio.Event().wait()


async def test_health_is_shared_and_retries_are_scheduled_once(
    fake_memories: MemoryFactory,
) -> None:
    summarizer = ScriptedSummarizer()
    summarizer.fail_always()
    cfg = config(full_zone_turns=1, retry_attempts=2, retry_backoff_base_s=0.05)
    a, b = fake_memories(cfg, summarizer=summarizer), fake_memories(cfg, summarizer=summarizer)
    await a.add_turn(turn(0))
    await b.add_turn(turn(1))
    with anyio.fail_after(5):
        await b.flush()  # returns once degraded
    await a.get_llm_context()
    assert a.health.value == b.health.value == "degraded"
    assert len(summarizer.calls) == 3, "first attempt + 2 retries, once for the session"
    assert a.to_dict()["backlog"] and not a.to_dict()["pending"]


async def test_from_dict_is_visible_to_other_instances(fake_memories: MemoryFactory) -> None:
    a, b = fake_memories(config("truncation")), fake_memories(config("truncation"))
    await a.add_turn(turn(1))
    state = json.loads(json.dumps(a.to_dict()))
    await a.add_turn(turn(2))
    b.from_dict(state)  # written before it returns: b has a synchronous client
    assert users((await a.get_llm_context())["conversation_memory"]["recent_turns"]) == ["u1"]
    with pytest.raises(ValueError):
        b.from_dict({"version": 2})
    assert users((await a.get_llm_context())["conversation_memory"]["recent_turns"]) == ["u1"]


async def test_from_dict_without_a_sync_client_writes_before_the_next_call(
    fake_memories: MemoryFactory,
) -> None:
    a = fake_memories(config("truncation"))
    b = fake_memories(config("truncation"), sync_client=None)
    await a.add_turn(turn(1))
    state = json.loads(json.dumps(a.to_dict()))
    await a.add_turn(turn(2))
    b.from_dict(state)
    assert [t["user_message"] for t in b.to_dict()["turns"]] == ["u1"]  # shown at once
    await b.add_turn(turn(3))
    view = await a.get_llm_context()
    assert users(view["conversation_memory"]["recent_turns"]) == ["u1", "u3"]


async def test_a_corrupt_record_is_a_typed_error(
    fake_memories: MemoryFactory, fake_server: Any
) -> None:
    import fakeredis

    memory = fake_memories(config("truncation"))
    await memory.add_turn(turn(1))
    client = fakeredis.FakeAsyncRedis(server=fake_server)
    await client.hset(memory.redis_key, "doc", "{not json")
    await client.hincrby(memory.redis_key, "rev", 1)
    await client.aclose()
    with pytest.raises(RedisMemoryError, match="cannot be loaded"):
        await memory.get_llm_context()


async def test_a_state_the_estimator_cannot_measure_whole_stays_readable(
    fake_memories: MemoryFactory,
) -> None:
    """A token estimator that raises on a long text (a tokenizer's input limit), on a
    view a summary made long: the instance that wrote the state logs it and goes on (the
    next turn trims the view), and another instance reads that state as it was written,
    rather than refusing the key's only state for good."""

    def estimator(text: str) -> int:
        if len(text) > 400:
            raise ValueError("input too long for the tokenizer")
        return len(text) // 4 + 1

    async def summarizer(payload: Any) -> dict[str, str]:
        return {"summary": "s" * 380}  # fits alone, not in a view with a turn

    cfg = config(
        full_zone_turns=1, summary_max_tokens=200, total_max_tokens=1000, token_estimator=estimator
    )
    a, b = fake_memories(cfg, summarizer=summarizer), fake_memories(cfg, summarizer=summarizer)
    await a.add_turn(turn(0))
    await a.add_turn(turn(1))
    await asyncio.wait_for(a.flush(), 5)
    view = dict(await b.get_llm_context())["conversation_memory"]
    assert view["summary"] == "s" * 380
    assert users(view["recent_turns"]) == ["u1"]
