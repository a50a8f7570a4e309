"""The Redis backend across a session's life: expiry, replacements, retries of a lost
reply, the lease running out, corrupt records and the arguments it is given (fakeredis)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fakeredis
import pytest
from redis import exceptions as redis_errors
from stm_redis import RedisMemoryError, RedisShortTermMemory, RedisStateStore
from stm_redis import memory as stm_memory
from stm_stores import InMemoryStateStore

from reference_impl import (
    ConversationTurn,
    MemoryBudget,
    MemoryBudgetExceeded,
    MemoryKey,
    ShortTermMemoryConfig,
)
from reference_impl.store import CorruptStateError, StaleStateError, StateStoreError
from stm_conformance import ScriptedSummarizer
from stm_conformance.checks import config, turn, users

pytestmark = pytest.mark.anyio

MemoryFactory = Callable[..., RedisShortTermMemory]


def _recent(view: Any) -> list[str]:
    return users(view["conversation_memory"]["recent_turns"])


def _raw(fake_server: Any) -> fakeredis.FakeAsyncRedis:
    return fakeredis.FakeAsyncRedis(server=fake_server)


def _runs(lua: Any) -> Callable[[tuple[Any, ...]], bool]:
    """Whether a command runs the script ``lua`` (by SHA, or sent whole)."""
    return lambda args: args[1] in (lua.sha, lua.source)


@dataclass
class _Fault:
    """Commands of a memory failing (:func:`_fail`): the ones that failed, an event set at
    the first, and :meth:`end` to let commands through again."""

    failed: list[tuple[Any, ...]]
    happened: asyncio.Event
    end: Callable[[], None]


def _fail(
    memory: RedisShortTermMemory,
    pick: Callable[[tuple[Any, ...]], bool],
    *,
    reply_lost: bool,
    once: bool = False,
) -> _Fault:
    """The commands of ``memory`` that ``pick(args)`` chooses fail (``once``: the first
    only): run by the server, then their reply lost (``reply_lost``: a ``TimeoutError``,
    as redis-py raises when a read times out), or refused before they reach it."""
    client = memory._client
    real = client.execute_command
    fault = _Fault([], asyncio.Event(), lambda: setattr(client, "execute_command", real))

    async def faulty(*args: Any, **kwargs: Any) -> Any:
        chosen = pick(args) and not (once and fault.failed)
        if chosen and not reply_lost:
            fault.failed.append(args)
            fault.happened.set()
            raise redis_errors.ConnectionError("Connection refused")
        reply = await real(*args, **kwargs)
        if chosen:
            fault.failed.append(args)
            fault.happened.set()
            raise redis_errors.TimeoutError("Timeout reading from socket")
        return reply

    client.execute_command = faulty  # type: ignore[method-assign]
    return fault


async def test_an_expired_session_is_seen_as_gone_by_an_instance_that_read_it(
    fake_memories: MemoryFactory, fake_server: Any
) -> None:
    old, cfg = fake_memories(config("truncation")), config("truncation")
    for i in range(3):
        await old.add_turn(turn(i))
    client = _raw(fake_server)
    await client.delete(*old._keys.all())  # what the sliding TTL does to an idle session
    assert _recent(await old.get_llm_context()) == []
    await old.add_turn(turn(9))
    assert _recent(await fake_memories(cfg).get_llm_context()) == ["u9"]
    assert _recent(await old.get_llm_context()) == ["u9"]
    # The new life's counters start above the old one's: the old revision is not newer.
    revision = int(await client.hget(old.redis_key, "rev"))
    assert revision > 10**12
    await client.aclose()


async def test_a_replacement_whose_reply_was_lost_is_not_written_again(
    fake_memories: MemoryFactory,
) -> None:
    a = fake_memories(config("truncation"), sync_client=None)
    b = fake_memories(config("truncation"))
    await a.add_turn(turn(0))
    state = json.loads(json.dumps(a.to_dict()))
    client, real = a._client, a._client.execute_command
    lost = []

    async def lose_replace_reply(*args: Any, **kwargs: Any) -> Any:
        reply = await real(*args, **kwargs)
        if args[:2] == (b"EVALSHA", stm_memory._COMMIT.sha) and not lost:
            lost.append(args)  # the replacement lands; its reply does not
            raise redis_errors.TimeoutError("Timeout reading from socket")
        return reply

    client.execute_command = lose_replace_reply  # type: ignore[method-assign]
    a.from_dict(state)
    for _ in range(50):  # the background write runs and loses its reply
        await asyncio.sleep(0)
        if lost:
            break
    assert lost
    client.execute_command = real  # type: ignore[method-assign]
    await b.add_turn(turn(2), turn_id="b-2")  # lands after the replacement
    assert _recent(await a.get_llm_context()) == ["u0", "u2"]  # retried: found written
    assert _recent(await b.get_llm_context()) == ["u0", "u2"]
    assert await b.turn_recorded("b-2")


async def test_a_refusal_is_judged_on_the_state_as_it_is_now(fake_memories: MemoryFactory) -> None:
    cfg = ShortTermMemoryConfig(
        strategy="truncation",
        budget=MemoryBudget(
            full_zone_turns=50,
            summary_max_tokens=100,
            total_max_tokens=120,
            overflow_policy="error",
        ),
    )
    a, b = fake_memories(cfg), fake_memories(cfg)
    big = ConversationTurn("u" * 150, "a" * 150)
    await a.add_turn(ConversationTurn("u" * 100, "a" * 100))
    with pytest.raises(Exception, match="total_max_tokens"):
        await a.add_turn(big)  # over the budget with the first turn there
    await b.clear()  # another instance makes room; a's last read still holds the turn
    small = ConversationTurn("u" * 100, "a" * 100, turn_id="small")
    await a.add_turn(small)
    assert [t["user_message"] for t in a.to_dict()["turns"]] == ["u" * 100]


async def test_an_estimator_failing_on_the_summary_is_a_failed_call(
    fake_memories: MemoryFactory,
) -> None:
    def estimator(text: str) -> int:
        if "<|endoftext|>" in text:
            raise ValueError("disallowed special token")
        return len(text) // 4 + 1

    summarizer = ScriptedSummarizer()
    summarizer.summary_for = lambda payload: "s <|endoftext|>"  # type: ignore[method-assign]
    cfg = config(full_zone_turns=2, token_estimator=estimator, retry_attempts=1)
    memory = fake_memories(cfg, summarizer=summarizer)
    for i in range(3):
        await memory.add_turn(turn(i))
    await asyncio.wait_for(memory.flush(), 5)
    assert memory.health.value == "degraded" and len(summarizer.calls) == 2


async def test_a_loaded_state_in_retry_waits_its_backoff_from_the_load(
    fake_memories: MemoryFactory,
) -> None:
    summarizer = ScriptedSummarizer()
    summarizer.fail_always()
    cfg = config(full_zone_turns=1, retry_attempts=3, retry_backoff_base_s=30.0)
    first = fake_memories(cfg, summarizer=summarizer)
    for i in range(2):
        await first.add_turn(turn(i))
    await summarizer.wait_for_calls(1)
    for _ in range(100):
        if first.health.value == "retry":
            break
        await asyncio.sleep(0.01)
    state = json.loads(json.dumps(first.to_dict()))
    assert state["health"] == "retry"
    await first.aclose()
    for _ in range(5):  # loaded again and again: the retry stays 30 s away
        fake_memories(cfg, summarizer=summarizer).from_dict(state)
    await asyncio.sleep(0.2)
    assert len(summarizer.calls) == 1


async def test_turn_ids_follow_a_replacement(fake_memories: MemoryFactory) -> None:
    memory = fake_memories(config("truncation", full_zone_turns=10), turn_ids_kept=3)
    for i in range(6):
        await memory.add_turn(turn(i), turn_id=f"id{i}")
    early = json.loads(json.dumps(memory.to_dict()))
    memory.from_dict({**early, "turns": early["turns"][:2]})  # back to u0 and u1
    assert not await memory.turn_recorded("id5")  # the replaced history's ids are gone
    # The ids of the turns it holds stay, given as add_turn's keyword too: stored with
    # the turn, not only beside it. A retry of u1 is not stored twice.
    assert await memory.turn_recorded("id1")
    await memory.add_turn(turn(1), turn_id="id1")
    await memory.add_turn(turn(5), turn_id="id5")  # so it is recorded again, not dropped
    await memory.add_turn(turn(100), turn_id="id100")
    assert await memory.turn_recorded("id100")  # newest kept, whatever its seq
    await memory.add_turn(turn(100), turn_id="id100")  # a retry: once
    assert _recent(await memory.get_llm_context()) == ["u0", "u1", "u5", "u100"]


async def test_a_worker_whose_lease_ran_out_starts_no_call(
    fake_memories: MemoryFactory, fake_server: Any
) -> None:
    """Its renewals fail past the lease's life: the call it runs may finish (its outcome
    is fenced), but the next one starts only under a lease taken anew."""
    client = _raw(fake_server)
    starts: list[bytes | None] = []

    async def summarize(payload: Any) -> Any:
        starts.append(await client.get(memory._keys.lease))  # who holds the lease now
        await asyncio.sleep(0.4)
        return {"summary": "s"}

    memory = fake_memories(config(full_zone_turns=1), summarizer=summarize, lease_ttl_s=0.3)
    real = memory._client.execute_command

    async def renewals_fail(*args: Any, **kwargs: Any) -> Any:
        if args[:2] == (b"EVALSHA", stm_memory._RENEW.sha):
            raise redis_errors.ConnectionError("Connection refused")
        return await real(*args, **kwargs)

    memory._client.execute_command = renewals_fail  # type: ignore[method-assign]
    for i in range(3):
        await memory.add_turn(turn(i))  # the first call starts under the lease
    await asyncio.sleep(0.1)
    await memory.add_turn(turn(3))  # work for a next call
    await asyncio.wait_for(memory.flush(), 5)
    assert len(starts) >= 2
    owner = memory._owner.encode() + b"/"
    assert all(held is not None and held.startswith(owner) for held in starts), starts
    await client.aclose()


async def test_clear_moves_the_fencing_counter_on(
    fake_memories: MemoryFactory, fake_server: Any
) -> None:
    memory = fake_memories(config("truncation"))
    await memory.add_turn(turn(0))
    client = _raw(fake_server)
    before = await client.hmget(memory.redis_key, ["rev", "fence", "epoch"])
    await memory.clear()
    after = await client.hmget(memory.redis_key, ["rev", "fence", "epoch"])
    assert all(int(a) > int(b) for a, b in zip(after, before, strict=True))
    await client.aclose()


@pytest.mark.parametrize("field", ["rev", "fence", "epoch"])
@pytest.mark.parametrize("value", ["x", "007", "1" * 20, "1.5", ""])
async def test_a_corrupt_counter_is_a_typed_error_and_nothing_is_written(
    fake_memories: MemoryFactory, fake_server: Any, field: str, value: str
) -> None:
    """Also one that only ``HINCRBY`` would refuse (a leading zero, past 64 bits): checked
    first, it does not fail the script midway, after its first writes."""
    memory = fake_memories(config(full_zone_turns=1), summarizer=ScriptedSummarizer())
    await memory.add_turn(turn(0))
    client = _raw(fake_server)
    await client.hset(memory.redis_key, field, value)
    doc = await client.hget(memory.redis_key, "doc")
    with pytest.raises(RedisMemoryError) as caught:
        await memory.add_turn(turn(1), turn_id="t1")
    assert caught.value.recorded is False
    assert await client.hget(memory.redis_key, "doc") == doc
    assert await client.zscore(memory._keys.ids, "t1") is None
    other = fake_memories(config("truncation"))
    with pytest.raises(RedisMemoryError, match="corrupt"):
        await other.get_llm_context()
    await client.aclose()


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("ttl_s", math.inf, ValueError),
        ("ttl_s", math.nan, ValueError),
        ("ttl_s", 0.0004, ValueError),  # 0 ms: no expiry at all
        ("ttl_s", True, TypeError),
        ("ttl_s", "60", TypeError),
        ("lease_ttl_s", math.inf, ValueError),
        ("lease_ttl_s", 0, ValueError),
        ("poll_interval_s", math.nan, ValueError),
        ("poll_interval_s", -1.0, ValueError),
        ("max_attempts", 2.5, TypeError),
        ("max_attempts", 0, ValueError),
        ("turn_ids_kept", 1.5, TypeError),
        ("turn_ids_kept", True, TypeError),
        ("turn_ids_kept", 10**17, ValueError),  # -1e+17 in the script: refused midway
        ("max_attempts", 10**15, ValueError),
    ],
)
async def test_options_redis_would_refuse_midway_are_refused_at_once(
    fake_server: Any, option: str, value: Any, error: type[Exception]
) -> None:
    """Each option ends up in a script's arguments: one Redis refuses would fail the
    script after its first writes (``turn_ids_kept=1.5`` stored turns whose ``add_turn``
    reported nothing written). The store checks its ``ttl_s`` alike."""
    with pytest.raises(error, match=option):
        RedisShortTermMemory(
            fakeredis.FakeAsyncRedis(server=fake_server),
            config=config("truncation"),
            key=MemoryKey("t", "u", "s"),
            **{option: value},
        )
    if option == "ttl_s":
        with pytest.raises(error, match=option):
            RedisStateStore(fakeredis.FakeAsyncRedis(server=fake_server), ttl_s=value)
    for fine in (0.001, 3600.0, 7) if option.endswith("_s") else (1, 3):
        memory = RedisShortTermMemory(
            fakeredis.FakeAsyncRedis(server=fake_server),
            config=config("truncation"),
            key=MemoryKey("t", "u", "s"),
            owns_client=True,
            **{option: fine},
        )
        await memory.add_turn(turn(0))
        await memory.aclose()


async def test_the_turn_id_keyword_is_checked_like_a_turns_id(
    fake_memories: MemoryFactory,
) -> None:
    memory = fake_memories(config("truncation"))
    for bad in ("\ud800", "x" * 257, "", 7):
        with pytest.raises(TypeError, match="turn_id"):
            await memory.add_turn(turn(0), turn_id=bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="turn_id"):
            await memory.turn_recorded(bad)  # type: ignore[arg-type]
    assert _recent(await memory.get_llm_context()) == []


async def test_a_wrong_type_under_the_turn_ids_is_a_typed_error(
    fake_memories: MemoryFactory, fake_server: Any
) -> None:
    memory = fake_memories(config("truncation"))
    client = _raw(fake_server)
    await client.set(memory._keys.ids, "not a set")
    with pytest.raises(RedisMemoryError):
        await memory.turn_recorded("t")
    await client.aclose()


@pytest.mark.parametrize(
    ("rev", "state"),
    [
        (None, '{"version": 2}'),
        ("x", '{"version": 2}'),
        ("1", b"\xff\xfe"),
        ("1", "{not json"),
        ("1", '{"revision": 5}'),
        ("01", '{"revision": 1}'),
        (" 1", '{"revision": 1}'),
        ("1_0", '{"revision": 10}'),
    ],
    ids=[
        "no revision",
        "revision not a number",
        "not UTF-8",
        "not JSON",
        "revisions disagree",
        "leading zero",
        "leading space",
        "underscore",
    ],
)
async def test_the_state_store_reports_a_corrupt_record(
    fake_server: Any, rev: str | None, state: str | bytes
) -> None:
    client = _raw(fake_server)
    store = RedisStateStore(client, namespace="corrupt")
    mapping: dict[str, str | bytes] = {"state": state}
    if rev is not None:
        mapping["rev"] = rev
    await client.hset("corrupt:k", mapping=mapping)
    with pytest.raises(CorruptStateError) as caught:
        await store.load_memory_state("k")
    assert caught.value.key == "k"
    # A conditional save refuses it too, and leaves it as it is (as the SQLite store does).
    before = await client.hgetall("corrupt:k")
    expected = None if rev is None else int(rev) if rev.strip().isdigit() else 1
    with pytest.raises(CorruptStateError):
        await store.save_memory_state_if("k", {"revision": 2}, expected_revision=expected)
    assert await client.hgetall("corrupt:k") == before
    await client.aclose()


async def test_a_conditional_save_sent_again_after_it_landed_is_done(fake_server: Any) -> None:
    """A save whose reply was lost after the server ran it is sent again (redis-py retries
    a command whose connection failed): the copy finds the new revision holding this very
    state, and succeeds, rather than reporting the save that landed as stale. The same
    revision with another state is still stale."""
    client = _raw(fake_server)
    store = RedisStateStore(client, namespace="again")
    first = {"version": 2, "revision": 1, "summary": "a"}
    await store.save_memory_state_if("k", first, expected_revision=None)
    await store.save_memory_state_if("k", first, expected_revision=None)  # the copy
    assert await store.load_memory_state("k") == first
    with pytest.raises(StaleStateError):
        await store.save_memory_state_if("k", {**first, "summary": "b"}, expected_revision=None)
    second = {**first, "revision": 2}
    await store.save_memory_state_if("k", second, expected_revision=1)
    await store.save_memory_state_if("k", second, expected_revision=1)
    with pytest.raises(StaleStateError):
        await store.save_memory_state_if("k", first, expected_revision=None)
    assert await store.load_memory_state("k") == second
    await client.aclose()


async def test_a_record_not_utf8_is_corrupt_for_a_decoding_client_too(fake_server: Any) -> None:
    """A client made with ``decode_responses=True`` decodes a reply before the store reads
    it: a record that is not UTF-8 is still a ``CorruptStateError`` naming the key, and a
    key under the namespace that is not UTF-8 fails ``keys()`` with a ``StateStoreError``."""
    raw = _raw(fake_server)
    await raw.hset("bytes:k", mapping={"rev": "1", "state": b'{"revision": 1, "x": "\xff"}'})
    decoding = fakeredis.FakeAsyncRedis(server=fake_server, decode_responses=True)
    store = RedisStateStore(decoding, namespace="bytes")
    with pytest.raises(CorruptStateError) as caught:
        await store.load_memory_state("k")
    assert caught.value.key == "k"
    with pytest.raises(CorruptStateError):
        await store.save_memory_state_if("k", {"revision": 2}, expected_revision=1)
    await raw.set(b"bytes:\xff", "x")
    for client in (decoding, raw):
        with pytest.raises(StateStoreError, match="not UTF-8"):
            await RedisStateStore(client, namespace="bytes").keys()
    await decoding.aclose()
    await raw.aclose()


async def test_the_worker_backoff_survives_a_long_outage(fake_memories: MemoryFactory) -> None:
    summarizer = ScriptedSummarizer()
    memory = fake_memories(config(full_zone_turns=1), summarizer=summarizer)
    memory._wake = lambda: None  # type: ignore[method-assign]  # turns left pending
    for i in range(3):
        await memory.add_turn(turn(i))
    del memory._wake
    client, real = memory._client, memory._client.execute_command
    down = True

    async def outage(*args: Any, **kwargs: Any) -> Any:
        if down:
            raise redis_errors.ConnectionError("Connection refused")
        return await real(*args, **kwargs)

    waits: list[float] = []
    enough = asyncio.Event()

    async def cut_short(delay: float) -> None:  # each backoff, noted and not waited
        waits.append(delay)
        if len(waits) >= 1_100:  # past 2**1024 a float overflows
            enough.set()
        await asyncio.sleep(0)

    client.execute_command = outage  # type: ignore[method-assign]
    memory._sleep = cut_short  # type: ignore[method-assign]
    memory._wake()
    worker = memory._worker
    assert worker is not None
    waited = asyncio.ensure_future(enough.wait())
    await asyncio.wait([waited, worker], timeout=10, return_when=asyncio.FIRST_COMPLETED)
    waited.cancel()
    assert not worker.done(), f"the worker died after {len(waits)} failures"
    assert max(waits) <= 2.0
    down = False
    del memory._sleep
    await asyncio.wait_for(memory.flush(), 5)
    assert not memory.to_dict()["pending"]


def _late_outcome_replies(memory: RedisShortTermMemory) -> None:
    """The reply of every summarizer outcome's write comes 30 ms after the write landed:
    reads meanwhile see the state with the outcome in it (on a real server, a read on
    another connection can overtake a write's reply)."""
    real = memory._script

    async def late(lua: Any, args: Any, **kwargs: Any) -> Any:
        reply = await real(lua, args, **kwargs)
        if lua is stm_memory._COMMIT and kwargs.get("turn_id") is None:
            await asyncio.sleep(0.03)
        return reply

    memory._script = late  # type: ignore[method-assign]


async def test_a_persist_while_an_outcome_is_on_its_way_saves_the_health_shown(
    fake_memories: MemoryFactory,
) -> None:
    """SER-005: the failure that degraded the memory shows at once (synchronous accessors),
    its write to Redis comes later. A persist in between saves DEGRADED, as shown, not the
    HEALTHY state Redis still holds; hydrated, the state is DEGRADED too."""
    summarizer = ScriptedSummarizer()
    summarizer.fail_always()
    cfg = config(full_zone_turns=1, retry_attempts=0)
    memory = fake_memories(cfg, summarizer=summarizer)
    real = memory._script
    writing = asyncio.Event()

    async def slow_outcome(lua: Any, args: Any, **kwargs: Any) -> Any:
        if lua is stm_memory._COMMIT and kwargs.get("turn_id") is None:
            writing.set()
            await asyncio.sleep(0.2)  # the outcome's write has not landed yet
        return await real(lua, args, **kwargs)

    memory._script = slow_outcome  # type: ignore[method-assign]
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await asyncio.wait_for(writing.wait(), 5)
    assert memory.health.value == "degraded"
    store = InMemoryStateStore()
    await memory.persist(store, "k")
    saved = await store.load_memory_state("k")
    assert saved is not None and saved["health"] == "degraded"
    fresh = fake_memories(cfg, summarizer=ScriptedSummarizer())
    await fresh.hydrate(store, "k")
    assert fresh.health.value == "degraded"


async def test_a_failure_read_back_before_its_reply_is_counted_once(
    fake_memories: MemoryFactory,
) -> None:
    """HLT-004 through the synchronous accessors: DEGRADED shows after the first attempt
    and ``retry_attempts`` retries, never after fewer."""
    summarizer = ScriptedSummarizer()
    summarizer.fail_always()
    cfg = config(full_zone_turns=1, retry_attempts=2, retry_backoff_base_s=0.05)
    memory = fake_memories(cfg, summarizer=summarizer)
    _late_outcome_replies(memory)
    for i in range(3):
        await memory.add_turn(turn(i))
    seen = []
    while memory.health.value != "degraded" and len(seen) < 400:
        await memory.get_llm_context()  # adopts the newest state, outcome writes included
        seen.append((len(summarizer.calls), memory.health.value))
        await asyncio.sleep(0.005)
    assert memory.health.value == "degraded"
    assert len(summarizer.calls) == 3, f"(calls, health) as read: {seen}"


async def test_flush_raises_when_the_worker_crashes_rather_than_wait_forever(
    fake_memories: MemoryFactory,
) -> None:
    """As the reference's: a worker that crashes (a bug) makes ``flush()`` raise, instead
    of starting it again every poll while nothing gets summarized; the next call starts a
    worker afresh."""
    summarizer = ScriptedSummarizer()
    memory = fake_memories(config(full_zone_turns=1), summarizer=summarizer)
    hold = memory._hold

    async def broken(*args: Any) -> None:
        raise ValueError("a bug")

    memory._hold = broken  # type: ignore[method-assign]
    for i in range(3):
        await memory.add_turn(turn(i))
    with pytest.raises(RuntimeError, match="crashed") as raised:
        await asyncio.wait_for(memory.flush(), 5)
    assert isinstance(raised.value.__cause__, ValueError)
    memory._hold = hold  # type: ignore[method-assign]
    await asyncio.wait_for(memory.flush(), 5)
    assert memory.to_dict()["pending"] == [] and summarizer.calls


async def test_the_crash_of_a_worker_already_replaced_does_not_fail_flush(
    fake_memories: MemoryFactory,
) -> None:
    """As the reference's: the crash of a worker replaced before its done callback ran
    leaves ``flush()`` waiting for the running worker (seen as a stale crash failing the
    test above on a loaded machine)."""
    summarizer = ScriptedSummarizer()
    summarizer.hold()
    memory = fake_memories(config(full_zone_turns=1), summarizer=summarizer)
    for i in range(3):
        await memory.add_turn(turn(i))
    await summarizer.wait_for_calls(1)  # the worker's call is held

    async def crash() -> None:
        raise ValueError("a bug")

    replaced = asyncio.ensure_future(crash())
    await asyncio.sleep(0)
    memory._worker_ended(replaced)
    flushing = asyncio.ensure_future(memory.flush())
    await asyncio.sleep(0.05)
    assert not flushing.done(), flushing  # it waits for the running worker
    summarizer.release()
    await asyncio.wait_for(flushing, 5)
    assert memory.to_dict()["pending"] == [] and summarizer.calls


async def test_turn_recorded_answers_for_a_state_loaded_and_not_yet_written(
    fake_memories: MemoryFactory, fake_server: Any
) -> None:
    """Without a sync client ``from_dict`` writes in the background; ``turn_recorded``
    right after it answers for the loaded state's turns, not the replaced history's."""
    memory = fake_memories(config("truncation", full_zone_turns=5), sync_client=None)
    await memory.add_turn(turn(0), turn_id="old-turn")
    other = RedisShortTermMemory(  # the same session, on another server
        fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()),
        config=config("truncation", full_zone_turns=5),
        key=MemoryKey("t", "u", "s"),
        owns_client=True,
    )
    await other.add_turn(ConversationTurn("u1", "a1", turn_id="new-turn"))
    memory.from_dict(other.to_dict())
    await other.aclose()
    assert await memory.turn_recorded("new-turn")
    assert not await memory.turn_recorded("old-turn")


@pytest.mark.parametrize("replace", ["clear", "from_dict"])
async def test_an_outcome_refused_after_another_instance_replaced_the_state_is_not_shown(
    fake_memories: MemoryFactory, replace: str
) -> None:
    """WM-004: a call in flight when the state is replaced belongs to the replaced state.
    Another instance clears or loads the session while this one's call runs: the call's
    summary is refused, and this instance's view shows the new state as Redis holds it,
    also while its next call runs."""
    release, started = asyncio.Event(), asyncio.Event()
    calls: list[list[str]] = []

    async def summarize(payload: Any) -> Any:
        calls.append([t["user"] for t in payload["turns"]])
        if len(calls) == 1:
            started.set()
            await release.wait()
            return {"summary": "OLD-CONVERSATION"}
        await asyncio.sleep(1.0)  # the next call runs while the views are compared
        return {"summary": "next"}

    cfg = config(full_zone_turns=1)
    a, b = fake_memories(cfg, summarizer=summarize), fake_memories(cfg, summarizer=summarize)
    await a.add_turn(turn(0))
    await a.add_turn(turn(1))  # u0 pending: a's first call starts and waits
    await asyncio.wait_for(started.wait(), 5)
    await a.add_turn(turn(2))  # work for a next call
    if replace == "clear":
        await b.clear()
    else:
        b.from_dict({**a.to_dict(), "turns": [], "pending": [], "summary": ""})
    release.set()
    await asyncio.sleep(0.3)
    assert await a.get_llm_context() == await b.get_llm_context()
    assert a.to_dict()["summary"] == b.to_dict()["summary"] == ""
    assert a.estimate_tokens() == b.estimate_tokens()


async def test_an_add_turn_in_flight_across_aclose_leaves_no_task_and_no_lease(
    fake_memories: MemoryFactory, fake_server: Any
) -> None:
    """CON-003: ``aclose()`` while an ``add_turn``'s write is on the wire. The turn is
    stored, but no callback task starts on the closed memory, and a summarizer lease the
    write took is released rather than left to expire under nobody."""
    added: list[str] = []

    async def on_turn_added(t: ConversationTurn) -> None:
        added.append(t.user_message)

    cfg = config(full_zone_turns=1, on_turn_added=on_turn_added)
    memory = fake_memories(cfg, summarizer=ScriptedSummarizer())
    await memory.add_turn(turn(0))
    await asyncio.sleep(0.05)
    real = memory._script

    async def slow(lua: Any, args: Any, **kwargs: Any) -> Any:
        if lua is stm_memory._COMMIT and kwargs.get("turn_id"):
            await asyncio.sleep(0.05)  # network latency
        return await real(lua, args, **kwargs)

    memory._script = slow  # type: ignore[method-assign]
    adding = asyncio.create_task(memory.add_turn(turn(1)))  # evicts u0: takes the lease
    await asyncio.sleep(0.01)
    await memory.aclose()
    await adding
    await asyncio.sleep(0.05)
    assert added == ["u0"]
    assert not [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("stm-")]
    client = _raw(fake_server)
    assert await client.get(memory._keys.lease) is None
    reader = fake_memories(config(full_zone_turns=1), summarizer=ScriptedSummarizer())
    assert _recent(await reader.get_llm_context()) == ["u1"]
    await client.aclose()


async def test_a_worker_starting_late_renews_its_lease_before_the_call(
    fake_memories: MemoryFactory,
) -> None:
    """WM-004, at most one call in flight: ``add_turn``'s write takes the lease for this
    instance's worker, and the loop is then held for most of the lease's life. The worker
    renews the lease before it calls, so another instance cannot take it over and call
    on the same turns while the first call runs."""
    running: list[str] = []
    most = [0]

    def summarizer(name: str) -> Any:
        async def summarize(payload: Any) -> Any:
            running.append(name)
            most[0] = max(most[0], len(running))
            await asyncio.sleep(0.6)
            running.remove(name)
            return {"summary": f"by {name}"}

        return summarize

    cfg = config(full_zone_turns=1)
    a = fake_memories(cfg, summarizer=summarizer("a"), lease_ttl_s=0.3, poll_interval_s=0.01)
    b = fake_memories(cfg, summarizer=summarizer("b"), lease_ttl_s=0.3, poll_interval_s=0.01)
    await a.add_turn(turn(0))
    await a.add_turn(turn(1))  # u0 pending: this write takes the lease for a's worker
    time.sleep(0.25)  # noqa: ASYNC251 - the application's own blocking work, or a starved loop
    await asyncio.wait_for(b.flush(), 5)
    await asyncio.sleep(0.7)
    assert most[0] == 1


def _commits_sent_twice(memory: RedisShortTermMemory, which: Callable[[Any], bool]) -> None:
    """Each ``COMMIT`` that ``which(args)`` picks runs, then runs again and the second
    reply is the one returned: what redis-py's default retry does when a write landed
    and its reply was lost (``Redis(...)`` retries a command on a connection error)."""
    real, commit = memory._client.execute_command, _runs(stm_memory._COMMIT)

    async def twice(*args: Any, **kwargs: Any) -> Any:
        reply = await real(*args, **kwargs)
        if commit(args) and which(args):
            reply = await real(*args, **kwargs)
        return reply

    memory._client.execute_command = twice  # type: ignore[method-assign]


async def test_a_summarizer_failure_sent_twice_by_the_client_counts_once(
    fake_memories: MemoryFactory, fake_server: Any
) -> None:
    """HLT-004: with ``retry_attempts=1`` one failed call leaves the memory in RETRY."""
    summarizer = ScriptedSummarizer()
    summarizer.fail_always()
    cfg = config(full_zone_turns=1, retry_attempts=1, retry_backoff_base_s=30.0)
    memory = fake_memories(cfg, summarizer=summarizer)
    _commits_sent_twice(memory, lambda args: args[7] == "")  # no turn id: an outcome
    for i in range(2):
        await memory.add_turn(turn(i))
    await summarizer.wait_for_calls(1)
    await asyncio.sleep(0.1)
    reader = fake_memories(cfg, summarizer=ScriptedSummarizer())
    await reader.get_llm_context()
    stored = reader.to_dict()
    assert (stored["health"], stored["failures"]) == ("retry", 1)
    assert memory.health.value == "retry" and len(summarizer.calls) == 1


async def test_an_add_turn_sent_twice_by_the_client_is_recorded_and_reported_once(
    fake_memories: MemoryFactory,
) -> None:
    """The second copy finds the turn's id recorded: by this very write, which took the
    summarizer lease too. The turn is reported (CB-001) and the lease used at once."""
    added: list[str] = []

    async def on_turn_added(t: ConversationTurn) -> None:
        added.append(t.user_message)

    summarizer = ScriptedSummarizer()
    cfg = config(full_zone_turns=1, on_turn_added=on_turn_added)
    memory = fake_memories(cfg, summarizer=summarizer)
    _commits_sent_twice(memory, lambda args: args[7] != "")  # a turn's write
    for i in range(2):
        await memory.add_turn(turn(i))
    await asyncio.wait_for(memory.flush(), 1)  # the lease is not left to expire (5 s)
    await asyncio.sleep(0.05)
    assert added == ["u0", "u1"]
    assert _recent(await memory.get_llm_context()) == ["u1"] and len(summarizer.calls) == 1


async def test_a_from_dict_made_while_clear_runs_comes_after_it(
    fake_memories: MemoryFactory,
) -> None:
    """Without a sync client: ``from_dict`` called while ``clear()``'s reply is on its
    way is written after the clear, and the memory goes on working."""
    cfg = config("truncation", full_zone_turns=3)
    memory, peer = fake_memories(cfg, sync_client=None), fake_memories(cfg)
    await memory.add_turn(turn(0))
    loaded = json.loads(json.dumps(memory.to_dict()))
    await memory.add_turn(turn(1))
    replied, resume = asyncio.Event(), asyncio.Event()
    real = memory._script

    async def script(lua: Any, args: Any, **kwargs: Any) -> Any:
        reply = await real(lua, args, **kwargs)
        if lua is stm_memory._CLEAR:
            replied.set()
            await resume.wait()
        return reply

    memory._script = script  # type: ignore[method-assign]

    async def load_meanwhile() -> None:
        await replied.wait()
        resume.set()  # clear() resumes first, then the replacement runs
        memory.from_dict(loaded)

    await asyncio.gather(memory.clear(), load_meanwhile())
    await memory.add_turn(turn(2))
    assert _recent(await memory.get_llm_context()) == ["u0", "u2"]
    assert _recent(await peer.get_llm_context()) == ["u0", "u2"]


@pytest.mark.parametrize("sync", [True, False])
async def test_a_state_loaded_after_the_lease_was_taken_is_summarized_once(
    fake_memories: MemoryFactory, fake_server: Any, sync: bool
) -> None:
    """WM-004: ``add_turn``'s write takes the lease, then ``from_dict`` replaces the state
    before the worker runs. The worker calls on the loaded state's pending turn once, not
    under the old lease (whose outcome could never be installed) again and again."""
    cfg = config(full_zone_turns=1)
    donor = RedisShortTermMemory(  # the state to load: u100 pending, u101 recent
        fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()),
        config=cfg,
        key=MemoryKey("t", "u", "s"),
        summarizer=ScriptedSummarizer(),
        owns_client=True,
    )
    donor._wake = lambda: None  # type: ignore[method-assign]  # u100 stays pending
    for i in (100, 101):
        await donor.add_turn(turn(i))
    loaded = json.loads(json.dumps(donor.to_dict()))
    await donor.aclose()
    summarizer = ScriptedSummarizer()
    options = {} if sync else {"sync_client": None}
    memory = fake_memories(cfg, summarizer=summarizer, **options)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 pending: this write takes the lease
    memory.from_dict(loaded)
    await asyncio.wait_for(memory.flush(), 5)
    await asyncio.sleep(0.1)
    sent = [[t["user"] for t in call["turns"]] for call in summarizer.calls]
    assert sent == [["u100"]]


async def test_a_persist_does_not_stamp_its_revision_on_a_state_hydrated_meanwhile(
    fake_memories: MemoryFactory,
) -> None:
    """SER-006: while one instance's save to record "k1" is in flight, another hydrates
    record "k2" (revision 7). The first's revision (1) must not land on the loaded state,
    whose next persist to "k2" would then be refused as stale."""
    cfg = config("truncation", full_zone_turns=3)
    inner = InMemoryStateStore()
    seeded = RedisShortTermMemory(
        fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()),
        config=cfg,
        key=MemoryKey("t", "u", "s"),
        owns_client=True,
    )
    await seeded.add_turn(turn(50))
    await inner.save_memory_state("k2", {**seeded.to_dict(), "revision": 7, "storage_key": "k2"})
    await seeded.aclose()
    saved, go = asyncio.Event(), asyncio.Event()

    class Held:  # a store whose conditional save returns when told to
        async def save_memory_state(self, key: str, state: Any) -> None:
            await inner.save_memory_state(key, state)

        async def save_memory_state_if(
            self, key: str, state: Any, *, expected_revision: int | None
        ) -> None:
            await inner.save_memory_state_if(key, state, expected_revision=expected_revision)
            saved.set()
            await go.wait()

        async def load_memory_state(self, key: str) -> Any:
            return await inner.load_memory_state(key)

    store = Held()
    a, b = fake_memories(cfg), fake_memories(cfg)
    await a.add_turn(turn(0))
    persisting = asyncio.ensure_future(a.persist(store, "k1"))
    await saved.wait()
    await b.hydrate(store, "k2")
    go.set()
    await persisting
    await b.get_llm_context()
    assert b.to_dict()["revision"] == 7
    await b.persist(store, "k2")
    assert (await inner.load_memory_state("k2"))["revision"] == 8


async def test_a_stored_turn_sent_again_is_not_refused_by_the_error_policy(
    fake_memories: MemoryFactory,
) -> None:
    """BUD-006 with turn ids: the documented retry after a lost reply,
    ``add_turn(turn, turn_id=error.turn_id)``, of a turn that did land. The state holding
    it leaves no room for it again, but it is recorded, so nothing is refused."""
    cfg = config(
        "truncation",
        full_zone_turns=5,
        total_max_tokens=60,
        summary_max_tokens=10,
        overflow_policy="error",
    )
    memory = fake_memories(cfg)
    big = ConversationTurn("u" * 120, "a")
    fault = _fail(memory, _runs(stm_memory._COMMIT), reply_lost=True)
    with pytest.raises(RedisMemoryError) as lost:
        await memory.add_turn(big, turn_id="req-1")
    assert lost.value.recorded is None
    fault.end()
    await memory.get_llm_context()  # the state read now holds the turn
    await memory.add_turn(big, turn_id="req-1")
    await memory.add_turn(big, turn_id="req-1")
    assert _recent(await memory.get_llm_context()) == ["u" * 120]


async def test_the_turn_ids_expire_with_the_state_not_before_it(
    fake_memories: MemoryFactory, fake_server: Any
) -> None:
    """Taking the summarizer lease refreshes the session's expiry: of the turn ids too. A
    retry waits its backoff, then the worker's lease refreshes the expiry; until this
    worked, the ids expired first and a retried turn was stored twice."""
    calls: list[float] = []
    retrying = asyncio.Event()

    async def summarize(payload: Any) -> Any:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("the first call fails")
        retrying.set()
        await asyncio.sleep(1.0)  # a slow call: no write refreshes the expiry meanwhile
        return {"summary": "s"}

    cfg = config(full_zone_turns=1, retry_backoff_base_s=0.4, retry_attempts=3)
    memory = fake_memories(cfg, summarizer=summarize, ttl_s=1.0, lease_ttl_s=0.3)
    await memory.add_turn(turn(0), turn_id="id-0")
    await memory.add_turn(turn(1), turn_id="id-1")
    await asyncio.wait_for(retrying.wait(), 5)  # the retry, under a lease taken by ACQUIRE
    await asyncio.sleep(0.05)
    client = _raw(fake_server)
    state_ms, ids_ms = await client.pttl(memory._keys.state), await client.pttl(memory._keys.ids)
    assert abs(state_ms - ids_ms) < 100, (state_ms, ids_ms)
    await client.aclose()


@pytest.mark.parametrize("meanwhile", ["clear", "from_dict"])
async def test_a_replacement_retried_after_many_writes_overwrites_none_of_them(
    fake_memories: MemoryFactory, meanwhile: str
) -> None:
    """Without a sync client, a ``from_dict`` whose write landed and whose reply was lost
    is retried at this instance's next call, maybe much later. Another instance cleared
    or loaded the session since and wrote 40 turns: the retry finds its replacement made
    and overwrites none of them."""
    cfg = config("truncation", full_zone_turns=50)
    a, b = fake_memories(cfg, sync_client=None), fake_memories(cfg)
    await a.add_turn(turn(0))
    loaded = json.loads(json.dumps(a.to_dict()))
    fault = _fail(a, lambda args: "bump:" in str(args[-1]), reply_lost=True, once=True)
    a.from_dict(loaded)
    await asyncio.wait_for(fault.happened.wait(), 5)
    await asyncio.sleep(0.01)
    fault.end()
    if meanwhile == "clear":
        await b.clear()
    else:
        b.from_dict({**loaded, "turns": []})
    for i in range(1, 41):
        await b.add_turn(turn(i))
    await a.get_llm_context()  # retries the replacement
    assert _recent(await b.get_llm_context()) == [f"u{i}" for i in range(1, 41)]


async def test_a_persist_whose_revision_could_not_be_written_does_not_block_the_next(
    fake_memories: MemoryFactory,
) -> None:
    """SER-006 refuses stale writers, not the only one: the store saved revision 2, then
    Redis failed before the memory recorded it. The error is raised; the next persist
    writes revision 2 to Redis first and saves revision 3."""
    memory = fake_memories(config("truncation", full_zone_turns=3))
    inner = InMemoryStateStore()
    await memory.add_turn(turn(0))
    await memory.persist(inner, "k")
    await memory.add_turn(turn(1))
    down = False
    commit = _runs(stm_memory._COMMIT)
    _fail(memory, lambda args: down and commit(args), reply_lost=False)

    class SavesThenRedisFails:
        async def save_memory_state(self, key: str, state: Any) -> None:
            await inner.save_memory_state(key, state)

        async def save_memory_state_if(
            self, key: str, state: Any, *, expected_revision: int | None
        ) -> None:
            nonlocal down
            await inner.save_memory_state_if(key, state, expected_revision=expected_revision)
            down = True

        async def load_memory_state(self, key: str) -> Any:
            return await inner.load_memory_state(key)

    with pytest.raises(RedisMemoryError):
        await memory.persist(SavesThenRedisFails(), "k")
    down = False
    await memory.add_turn(turn(2))
    await memory.persist(inner, "k")
    stored = await inner.load_memory_state("k")
    assert stored is not None and stored["revision"] == 3
    assert [t["user_message"] for t in stored["turns"]] == ["u0", "u1", "u2"]


async def test_a_clear_that_fails_keeps_a_state_loaded_before_it(
    fake_memories: MemoryFactory,
) -> None:
    """Without a sync client: ``from_dict``, then a ``clear()`` that Redis refuses. The
    clear raises and clears nothing; the loaded state is not dropped but written."""
    cfg = config("truncation", full_zone_turns=3)
    memory, peer = fake_memories(cfg, sync_client=None), fake_memories(cfg)
    await memory.add_turn(turn(0))
    loaded = json.loads(json.dumps(memory.to_dict()))
    await memory.add_turn(turn(1))
    fault = _fail(memory, _runs(stm_memory._CLEAR), reply_lost=False)
    memory.from_dict(loaded)
    with pytest.raises(RedisMemoryError):
        await memory.clear()
    fault.end()
    await memory.get_llm_context()
    assert _recent(await peer.get_llm_context()) == ["u0"]


async def test_a_turn_stored_by_a_write_whose_reply_was_lost_is_reported_at_its_retry(
    fake_memories: MemoryFactory,
) -> None:
    """CB-001: the documented retry ``add_turn(turn, turn_id=error.turn_id)`` of a turn
    whose first write landed finds that very write made: ``on_turn_added`` runs for it
    once."""
    added: list[str] = []

    async def on_turn_added(t: ConversationTurn) -> None:
        added.append(t.user_message)

    memory = fake_memories(config("truncation", on_turn_added=on_turn_added))
    await memory.add_turn(turn(0))
    fault = _fail(memory, _runs(stm_memory._COMMIT), reply_lost=True)
    with pytest.raises(RedisMemoryError) as lost:
        await memory.add_turn(turn(1))
    fault.end()
    assert lost.value.recorded is None and lost.value.turn_id is not None
    await memory.add_turn(turn(1), turn_id=lost.value.turn_id)
    await memory.add_turn(turn(1), turn_id=lost.value.turn_id)  # a second retry: once
    await asyncio.sleep(0.05)
    assert added == ["u0", "u1"]
    assert _recent(await memory.get_llm_context()) == ["u0", "u1"]


@pytest.mark.parametrize("outcome", ["summary", "failure"])
async def test_an_outcome_written_whose_reply_was_lost_runs_its_callback(
    fake_memories: MemoryFactory, outcome: str
) -> None:
    """CB-002, CB-003: the write of a summarizer outcome lands and its reply is lost. It
    is sent again with the same write id, found made, and its callback runs once."""
    summaries: list[str] = []
    changes: list[tuple[str, str]] = []

    async def on_summary(old: str, new: str) -> None:
        summaries.append(new)

    async def on_health(old: Any, new: Any) -> None:
        changes.append((old.value, new.value))

    summarizer = ScriptedSummarizer()
    if outcome == "failure":
        summarizer.fail_always()
    cfg = config(
        full_zone_turns=1,
        retry_backoff_base_s=30.0,
        on_summary_updated=on_summary,
        on_health_changed=on_health,
    )
    memory = fake_memories(cfg, summarizer=summarizer)
    commit = _runs(stm_memory._COMMIT)

    def an_outcome(args: tuple[Any, ...]) -> bool:  # the only writes that are fenced
        return commit(args) and str(args[-1]).split(" ")[4] != "-"

    fault = _fail(memory, an_outcome, reply_lost=True, once=True)
    for i in range(2):
        await memory.add_turn(turn(i))
    await summarizer.wait_for_calls(1)
    await asyncio.sleep(0.2)
    assert fault.failed and len(summarizer.calls) == 1
    if outcome == "summary":
        assert len(summaries) == 1 and changes == []
    else:
        assert summaries == [] and changes == [("healthy", "retry")]


@pytest.mark.parametrize("state", ["retry", "degraded"])
async def test_another_instance_reading_the_session_retries_when_the_failing_one_is_gone(
    fake_memories: MemoryFactory, state: str
) -> None:
    """HLT-002, HLT-006: the instance whose call failed is closed; another reads the
    session (RETRY, or DEGRADED with a backlog) and nothing else. The memory retries (or
    recovers) by itself: that instance's worker does it when the timer fires."""
    summarizer = ScriptedSummarizer()
    summarizer.fail_always()
    if state == "retry":
        cfg = config(full_zone_turns=2, retry_attempts=2, retry_backoff_base_s=0.3)
    else:
        cfg = config(full_zone_turns=2, retry_attempts=0, degraded_retry_interval_s=0.3)
    a = fake_memories(cfg, summarizer=summarizer, lease_ttl_s=0.6)
    b = fake_memories(cfg, summarizer=summarizer, lease_ttl_s=0.6)
    for i in range(3):
        await a.add_turn(turn(i))
    await summarizer.wait_for_calls(1)
    await asyncio.sleep(0.05)  # the failure is written
    await a.aclose()
    summarizer.succeed()
    await b.get_llm_context()
    assert b.health.value == state
    for _ in range(20):  # 2 s: well past the 0.3 s timer
        await asyncio.sleep(0.1)
        await b.get_llm_context()
        if b.health.value == "healthy":
            break
    assert b.health.value == "healthy" and len(summarizer.calls) == 2


async def test_a_call_begun_before_a_from_dict_never_reaches_the_summarizer(
    fake_memories: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WM-004: the worker has its batch and starts the call, and ``from_dict`` replaces the
    state before the summarizer runs. The call belongs to the replaced state, so it must
    not reach the summarizer: the loaded state sends the same turns in a call of its own,
    and the turns would go to two successful calls."""
    calls: list[list[str]] = []

    async def summarize(payload: Any) -> Any:
        calls.append(users(payload["turns"]))
        return {"summary": " ".join(calls[-1])}

    memory = fake_memories(config(full_zone_turns=1), summarizer=summarize)
    real = stm_memory.call_summarizer
    replaced: list[bool] = []

    async def replacing_first(summarizer: Any, batch: Any, *args: Any) -> Any:
        def invoked(payload: Any) -> Any:
            call = summarizer(payload)  # the call is made; its task has not started
            if not replaced:
                replaced.append(True)
                memory.from_dict(memory.to_dict())
            return call

        return await real(invoked, batch, *args)

    monkeypatch.setattr(stm_memory, "call_summarizer", replacing_first)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 pending: the worker starts a call
    await asyncio.wait_for(memory.flush(), 5)
    assert replaced
    assert calls == [["u0"]]
    assert memory.to_dict()["summary"] == "u0"


async def test_a_from_dict_redis_refuses_leaves_the_call_in_flight_its_summary(
    fake_memories: MemoryFactory,
) -> None:
    """A ``from_dict`` whose write Redis refuses (out of memory, a dropped connection)
    replaced nothing: the call in flight still belongs to the state, and its summary is
    installed, not dropped with its turns sent to a second successful call (WM-004)."""
    summarizer = ScriptedSummarizer()
    memory = fake_memories(config(full_zone_turns=1), summarizer=summarizer)
    await memory.add_turn(turn(0))
    loaded = memory.to_dict()
    summarizer.hold()
    await memory.add_turn(turn(1))  # u0 evicted: its call is held
    await summarizer.wait_for_calls(1)

    def refused(**_: Any) -> Any:
        raise redis_errors.ResponseError("OOM command not allowed when used memory > 'maxmemory'")

    memory._sync_commit = refused  # type: ignore[assignment]
    with pytest.raises(RedisMemoryError, match="OOM"):
        memory.from_dict(loaded)
    summarizer.release()
    await asyncio.wait_for(memory.flush(), 5)
    sent = [users(call["turns"]) for call in summarizer.calls]
    assert sent == [["u0"]], f"the call in flight was dropped and its turns sent again: {sent}"
    context = await memory.get_llm_context()
    assert context["conversation_memory"]["summary"] == summarizer.outputs[0]


async def test_a_state_not_utf8_is_a_typed_error_with_a_decoding_client(fake_server: Any) -> None:
    """A client made with ``decode_responses=True`` decodes replies itself: a stored state
    that is not UTF-8 fails there, and is reported as with any other client."""
    client = fakeredis.FakeAsyncRedis(server=fake_server, decode_responses=True)
    memory = RedisShortTermMemory(
        client, config=config("truncation"), key=MemoryKey("t", "u", "s"), owns_client=True
    )
    await memory.add_turn(turn(0))
    assert _recent(await memory.get_llm_context()) == ["u0"]  # it works with such a client
    raw = _raw(fake_server)
    await raw.hset(memory.redis_key, "doc", b"\xff\xfe")
    reader = RedisShortTermMemory(
        fakeredis.FakeAsyncRedis(server=fake_server, decode_responses=True),
        config=config("truncation"),
        key=MemoryKey("t", "u", "s"),
        owns_client=True,
    )
    with pytest.raises(RedisMemoryError, match="corrupt"):
        await reader.get_llm_context()
    with pytest.raises(RedisMemoryError, match="corrupt"):
        await reader.add_turn(turn(1))
    await reader.aclose()
    await memory.aclose()
    await raw.aclose()


async def test_overlapping_persists_of_one_instance_write_in_call_order(
    fake_memories: MemoryFactory,
) -> None:
    """One instance, the only writer: a persist made while its last one is still writing
    is no stale write; each expects the revision the one before it wrote."""
    inner = InMemoryStateStore()

    class Slow:
        async def save_memory_state(self, key: str, state: Any) -> None:
            await inner.save_memory_state(key, state)

        async def save_memory_state_if(
            self, key: str, state: Any, *, expected_revision: int | None
        ) -> None:
            await asyncio.sleep(0.02)
            await inner.save_memory_state_if(key, state, expected_revision=expected_revision)

    memory = fake_memories(config("truncation", full_zone_turns=5))
    await memory.add_turn(turn(1))
    first = asyncio.ensure_future(memory.persist(Slow(), "k"))
    await asyncio.sleep(0.01)
    await memory.add_turn(turn(2))
    second = asyncio.ensure_future(memory.persist(Slow(), "k"))
    await asyncio.gather(first, second)
    stored = await inner.load_memory_state("k")
    assert stored is not None
    assert [t["user_message"] for t in stored["turns"]] == ["u1", "u2"]
    assert stored["revision"] == memory.to_dict()["revision"] == 2


async def test_nothing_given_out_before_a_rollback_is_given_out_again(
    fake_memories: MemoryFactory, fake_server: Any
) -> None:
    """A server that rolls back (restarted from an older snapshot, failed over to a lagging
    replica) goes on from older counters. The revisions, fences and epochs it gives out
    from then on are still new: an instance holding a revision lost in the rollback would
    otherwise take another state that reached the same revision for the one it knows,
    show turns that are gone, and overwrite the turns written since."""
    cfg = config("truncation", full_zone_turns=50, total_max_tokens=0)
    a, b = fake_memories(cfg), fake_memories(cfg)
    client = _raw(fake_server)
    keys = (a._keys.state, a._keys.ids)
    await a.add_turn(turn(0))
    snapshot = [await client.dump(k) for k in keys]
    for i in (1, 2):
        await a.add_turn(turn(i))
    await a.clear()  # every counter moves on
    await a.add_turn(turn(1))
    seen = [int(v) for v in await client.hmget(a.redis_key, ["rev", "fence", "epoch"])]
    for k, dumped in zip(keys, snapshot, strict=True):  # the rollback: back to u0 alone
        await client.restore(k, 0, dumped, replace=True)
    assert _recent(await a.get_llm_context()) == ["u0"], "a read shows what the server holds"
    for i in (3, 4):
        await b.add_turn(turn(i))
    assert _recent(await a.get_llm_context()) == ["u0", "u3", "u4"]
    await a.add_turn(turn(5))
    assert _recent(await b.get_llm_context()) == ["u0", "u3", "u4", "u5"]
    await b.clear()
    now = [int(v) for v in await client.hmget(a.redis_key, ["rev", "fence", "epoch"])]
    assert all(n > s for n, s in zip(now, seen, strict=True)), (seen, now)
    await client.aclose()


async def test_a_call_in_flight_across_a_rollback_installs_nothing_into_turns_still_recent(
    fake_memories: MemoryFactory, fake_server: Any
) -> None:
    """The server rolls back to before a turn was evicted, while a summarizer call of it
    runs. Its summary must not be installed into the rolled-back state, where the turn is
    recent again: that would count a recent turn as summarized, a state no instance could
    load any more."""
    gate = asyncio.Event()
    calls: list[list[str]] = []

    async def summarizer(payload: Any) -> dict[str, str]:
        calls.append(users(payload["turns"]))
        if len(calls) == 1:
            await gate.wait()
        return {"summary": "S(" + ",".join(calls[-1]) + ")"}

    cfg = config(full_zone_turns=2)
    a = fake_memories(cfg, summarizer=summarizer, lease_ttl_s=1.0)
    client = _raw(fake_server)
    keys = (a._keys.state, a._keys.ids)
    for i in (0, 1):
        await a.add_turn(turn(i))
    snapshot = [await client.dump(k) for k in keys]
    for i in (2, 3):  # u0 is evicted: a call of it starts, held; then u1
        await a.add_turn(turn(i))
    for _ in range(200):
        if calls:
            break
        await asyncio.sleep(0.01)
    assert calls == [["u0"]], f"precondition: one call of the evicted turn, not {calls}"
    for k, dumped in zip(keys, snapshot, strict=True):  # back to u0 and u1 recent
        await client.restore(k, 0, dumped, replace=True)
    await client.delete(a._keys.lease)
    gate.set()
    await asyncio.sleep(0.3)
    reader = fake_memories(cfg, summarizer=summarizer)
    view = (await reader.get_llm_context())["conversation_memory"]
    assert users(view["recent_turns"]) == ["u0", "u1"] and "summary" not in view, view
    assert _recent(await a.get_llm_context()) == ["u0", "u1"]
    await client.aclose()


def _memory_tasks() -> list[str]:
    return [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("stm-")]


async def _summarizing(memories: MemoryFactory) -> RedisShortTermMemory:
    """A memory whose worker is in a summarizer call that does not return."""
    started = asyncio.Event()

    async def summarizer(payload: Any) -> dict[str, str]:
        started.set()
        await asyncio.sleep(30)
        return {"summary": "x"}

    memory = memories(config(full_zone_turns=1, summarizer_timeout_s=60), summarizer=summarizer)
    for i in range(3):
        await memory.add_turn(turn(i))
    await asyncio.wait_for(started.wait(), 5)
    return memory


class _SlowSaves(InMemoryStateStore):
    async def save_memory_state_if(
        self, key: str, state: Any, *, expected_revision: int | None
    ) -> None:
        await asyncio.sleep(0.3)
        await super().save_memory_state_if(key, state, expected_revision=expected_revision)


async def test_aclose_is_one_closing_however_often_and_however_interrupted(
    fake_memories: MemoryFactory,
) -> None:
    """CON-003: a second ``aclose()`` while the first runs, or one after a caller gave up
    waiting for the first, returns when the closing is over, not at once with the worker
    still running."""
    memory = await _summarizing(fake_memories)
    first = asyncio.create_task(memory.aclose())
    await asyncio.sleep(0)
    await memory.aclose()
    assert first.done() and _memory_tasks() == []
    await first

    memory = await _summarizing(fake_memories)
    saving = asyncio.create_task(memory.persist(_SlowSaves(), "k"))
    await asyncio.sleep(0.05)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(memory.aclose(), 0.05)
    await memory.aclose()
    assert saving.done() and _memory_tasks() == []
    await saving  # the save ran to its end


async def test_aclose_from_inside_a_callback_returns_and_closes(
    fake_memories: MemoryFactory,
) -> None:
    """A callback that closes its memory gets ``aclose()``'s return, not the cancellation
    of the callback task the closing stops; nothing of the memory runs on."""
    outcome: list[str] = []
    memory: RedisShortTermMemory | None = None

    async def on_turn_added(t: ConversationTurn) -> None:
        assert memory is not None
        await memory.aclose()
        outcome.append("returned")

    memory = fake_memories(config("truncation", on_turn_added=on_turn_added))
    await memory.add_turn(turn(0))
    for _ in range(100):
        if outcome:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert outcome == ["returned"] and _memory_tasks() == []


async def test_an_add_turn_under_way_when_aclose_begins_is_refused_as_before(
    fake_memories: MemoryFactory,
) -> None:
    """A call under way ends as it would have: an ``add_turn`` the ``error`` policy
    refuses raises ``MemoryBudgetExceeded``, not the closing memory's ``RuntimeError`` for
    the check it makes on the way (whether the turn was recorded already)."""
    cfg = config(
        "truncation",
        full_zone_turns=5,
        total_max_tokens=60,
        summary_max_tokens=10,
        overflow_policy="error",
    )
    memory = fake_memories(cfg)
    adding = asyncio.create_task(memory.add_turn(turn(0, pad=1000)))
    await asyncio.sleep(0)
    closing = asyncio.create_task(memory.aclose())
    with pytest.raises(MemoryBudgetExceeded):
        await adding
    await closing


async def test_a_hydrate_outlasting_the_close_grace_writes_nothing(
    fake_memories: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``aclose()`` gives up waiting for a ``hydrate`` whose store is slow: the hydrate
    then fails with ``RuntimeError`` rather than write the state it loaded through the
    closed memory (whose client would open a connection for it), and changes nothing."""

    class SlowLoads(InMemoryStateStore):
        async def load_memory_state(self, key: str) -> Any:
            await asyncio.sleep(0.3)
            return await super().load_memory_state(key)

    monkeypatch.setattr(stm_memory, "CLOSE_GRACE_S", 0.05)
    cfg = config("truncation", full_zone_turns=5)
    source = fake_memories(cfg, namespace="elsewhere")  # the same key, other Redis keys
    await source.add_turn(turn(7))
    store = SlowLoads()
    await source.persist(store, "k")
    memory = fake_memories(cfg, sync_client=None)  # the load is shown, then written
    await memory.add_turn(turn(0))
    shown = memory.to_dict()
    hydrating = asyncio.create_task(memory.hydrate(store, "k"))
    await asyncio.sleep(0.01)
    await memory.aclose()
    with pytest.raises(RuntimeError, match="closed memory"):
        await hydrating
    assert memory.to_dict() == shown, "a refused hydrate changed the state shown"
    reader = fake_memories(cfg)
    assert _recent(await reader.get_llm_context()) == ["u0"]


async def test_a_store_closing_the_memory_from_inside_its_save_does_not_deadlock(
    fake_memories: MemoryFactory,
) -> None:
    """``aclose()`` waits for the saves under way, but not for the one that closes the
    memory from inside the store: the persist and the closing both end (the persist with
    ``RuntimeError``: the memory closed, it could not record in Redis what it saved)."""
    memory = fake_memories(config("truncation"))

    class ClosingStore(InMemoryStateStore):
        async def save_memory_state_if(
            self, key: str, state: Any, *, expected_revision: int | None
        ) -> None:
            await memory.aclose()
            await super().save_memory_state_if(key, state, expected_revision=expected_revision)

    await memory.add_turn(turn(0))
    store = ClosingStore()
    # Saved, but closed before the revision saved could be recorded in Redis: said so.
    with pytest.raises(RuntimeError, match="closed memory"):
        await asyncio.wait_for(memory.persist(store, "k"), 2)
    assert await store.load_memory_state("k") is not None and _memory_tasks() == []
