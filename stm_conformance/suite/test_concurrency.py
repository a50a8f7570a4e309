"""CON — concurrent writers and background-work lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

import anyio
import pytest

from stm_conformance import RecordingCallbacks, ScriptedSummarizer
from stm_conformance._deadline import settle_tasks
from stm_conformance.checks import (
    concurrently,
    config,
    eventually,
    json_state,
    memory_view,
    patient,
    turn,
    users,
)
from stm_conformance.contract import MemoryKey
from stm_conformance.fixtures import CheckedMemory

req = pytest.mark.stm_requirement


def _ids(texts: list[str]) -> list[int]:
    return [int(u[1:].rstrip("x")) for u in texts]


@req("CON-001")
@pytest.mark.stm_capability("rolling_summary")
async def test_concurrent_add_turn_loses_nothing(make_memory, scripted_summarizer):
    # A backlog limit no run reaches: a turn lost here is CON-001's, not WM-006's.
    cfg = config(full_zone_turns=3, recovery_backlog_limit=1000)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    await concurrently(*(functools.partial(memory.add_turn, turn(i)) for i in range(60)))
    await memory.flush()
    sent = [u for call in scripted_summarizer.calls for u in users(call["turns"])]
    recent = users((await memory_view(memory))["recent_turns"])
    # Every call succeeds: a turn sent twice was kept by the install of the first (WM-003).
    twice = sorted({u for u in sent if sent.count(u) > 1})
    assert not twice, f"WM-003: {twice} were sent to two calls that both succeeded"
    everything = _ids(sent + recent)
    assert sorted(everything) == list(range(60)), (
        f"lost or duplicated turns: {sorted(set(range(60)) - set(everything))} missing"
    )


@req("CON-001")
@pytest.mark.stm_capability("rolling_summary")
async def test_concurrent_add_turn_while_degraded_loses_nothing(make_memory, scripted_summarizer):
    """The same while DEGRADED, where evicted turns go to the backlog: once the memory has
    recovered, every turn is recent or covered by a call that succeeded."""
    cfg = config(
        full_zone_turns=3,
        retry_attempts=0,
        recovery_backlog_limit=1000,  # no drop: a turn missing is CON-001's, not HLT-005's
        degraded_retry_interval_s=0.3,
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_next(1, mode="raise")
    for i in range(4):
        await memory.add_turn(turn(i))  # u0 evicted: its call fails, and the memory degrades
    await eventually(
        lambda: memory.health.value == "degraded", what="HLT-004: DEGRADED (precondition)"
    )
    await concurrently(*(functools.partial(memory.add_turn, turn(i)) for i in range(4, 64)))
    await eventually(
        lambda: memory.health.value == "healthy",
        timeout=5,
        what="HLT-006: recovery to HEALTHY (precondition)",
    )
    await memory.flush()
    summarizer = scripted_summarizer
    covered = [
        u
        for index, call in enumerate(summarizer.calls)
        if summarizer.outputs[index] is not None
        for u in users(call["turns"])
    ]
    recent = users((await memory_view(memory))["recent_turns"])
    missing = sorted(set(range(64)) - set(_ids(covered + recent)))
    assert not missing, (
        f"CON-001: turns added concurrently while DEGRADED are neither recent nor covered by "
        f"a summary once the memory recovered: {missing}"
    )


@req("CON-001")
@pytest.mark.stm_capability("truncation")
async def test_concurrent_add_turn_truncation(make_memory):
    memory = await make_memory(config("truncation", full_zone_turns=100, total_max_tokens=0))
    await concurrently(*(functools.partial(memory.add_turn, turn(i)) for i in range(50)))
    assert sorted(_ids(users((await memory_view(memory))["recent_turns"]))) == list(range(50))


@req("CON-002")
@pytest.mark.stm_capability("shared_state")
@pytest.mark.stm_capability("rolling_summary")
async def test_two_instances_on_one_key_lose_nothing(make_memory, make_peer, scripted_summarizer):
    key = MemoryKey("t", "u", "shared")
    cfg = config(full_zone_turns=3)
    a = await make_memory(cfg, key=key, summarizer=scripted_summarizer)
    b = await make_peer(cfg, key=key, summarizer=scripted_summarizer)

    async def write(memory, start):
        for i in range(start, start + 20):
            await memory.add_turn(turn(i))

    await concurrently(functools.partial(write, a, 0), functools.partial(write, b, 100))
    await a.flush()
    await b.flush()
    sent = [u for call in scripted_summarizer.calls for u in users(call["turns"])]
    view = await memory_view(a)
    seen = set(_ids(sent + users(view.get("pending_turns")) + users(view["recent_turns"])))
    expected = set(range(20)) | set(range(100, 120))
    assert expected <= seen, f"turns lost between instances: {sorted(expected - seen)}"


def _running_since(before: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """The tasks started since ``before`` was taken that are still running, this one aside."""
    return {t for t in asyncio.all_tasks() - before if not t.done()} - {asyncio.current_task()}


@req("CON-003")
@pytest.mark.stm_capability("rolling_summary")
@pytest.mark.stm_capability("serialization")
async def test_a_closed_memory_starts_no_work(stm_provider, scripted_summarizer):
    """After ``aclose()``, a ``from_dict`` of a state with a pending turn, a ``flush()`` and
    turns added start no task and no summarizer call: a closed memory may refuse them, or
    take the state and the turns, but its background work is over."""
    before = set(asyncio.all_tasks())
    cfg = config(full_zone_turns=1)
    raw = await stm_provider.create(cfg, MemoryKey("t", "u", "closed"), scripted_summarizer)
    memory = CheckedMemory(raw, cfg, scripted_summarizer)  # a blocking add_turn: WM-001
    if not hasattr(raw, "aclose"):
        pytest.skip("backend has no aclose()")
    scripted_summarizer.hold()
    for i in range(3):
        await memory.add_turn(turn(i))
    await scripted_summarizer.wait_for_calls(1)
    state = json_state(raw)
    with anyio.fail_after(patient(2)):
        await raw.aclose()
    calls = len(scripted_summarizer.calls)
    scripted_summarizer.release()
    with contextlib.suppress(Exception):  # refusing is fine
        raw.from_dict(state)
    with contextlib.suppress(Exception), anyio.fail_after(patient(2)):
        await raw.flush()
    for i in range(3, 5):  # evicting a turn: work for a summarizer, were it open
        with contextlib.suppress(Exception), anyio.fail_after(patient(2)):
            await raw.add_turn(turn(i))
    await asyncio.sleep(0.05)
    left = _running_since(before)
    assert not left, (
        f"CON-003: tasks running after aclose(), then from_dict, flush and add_turn: {left}"
    )
    assert len(scripted_summarizer.calls) == calls, (
        "CON-003: a summarizer call started after aclose() (from_dict, flush, add_turn)"
    )


class _SlowStore:
    """The provider's store, each save 0.3 s late: time to cancel the ``persist``."""

    def __init__(self, store: Any) -> None:
        self._store = store

    async def save_memory_state(self, key: str, state: Any) -> None:
        await asyncio.sleep(0.3)
        await self._store.save_memory_state(key, state)

    async def load_memory_state(self, key: str) -> Any:
        return await self._store.load_memory_state(key)


@req("CON-003")
@pytest.mark.stm_capability("persistence")
@pytest.mark.stm_capability("truncation")
async def test_a_persist_whose_caller_was_cancelled_is_over_by_aclose(
    stm_provider, stm_store, scripted_summarizer
):
    """A backend may let a save run on after its caller was cancelled (a store that
    commits in a thread finishes anyway); it is still the memory's work, done or cancelled
    by the time ``aclose()`` returns."""
    before = set(asyncio.all_tasks())
    cfg = config("truncation", full_zone_turns=3)
    key = MemoryKey("t", "u", "cancelled-persist")
    raw = await stm_provider.create(cfg, key, scripted_summarizer)
    if not hasattr(raw, "aclose"):
        pytest.skip("backend has no aclose()")
    await CheckedMemory(raw, cfg, scripted_summarizer).add_turn(turn(1))
    persist = asyncio.ensure_future(
        raw.persist(_SlowStore(stm_store), stm_provider.key_for_storage(key))
    )
    await asyncio.sleep(0.05)
    persist.cancel()
    await asyncio.gather(persist, return_exceptions=True)
    with anyio.fail_after(patient(2)):
        await raw.aclose()
    await asyncio.sleep(0)
    left = _running_since(before)
    assert not left, f"CON-003: tasks running after aclose(), a persist cancelled before: {left}"


@req("CON-003")
@pytest.mark.stm_capability("rolling_summary")
async def test_aclose_cancels_background_work(stm_provider, scripted_summarizer):
    before = set(asyncio.all_tasks())
    slow = RecordingCallbacks(delay_s=30.0)  # callback tasks are background work too
    callbacks = "callbacks" in stm_provider.capabilities
    cfg = config(full_zone_turns=1, **(slow.config_kwargs() if callbacks else {}))
    raw = await stm_provider.create(cfg, MemoryKey("t", "u", "close"), scripted_summarizer)
    memory = CheckedMemory(raw, cfg, scripted_summarizer)  # a blocking add_turn: WM-001/CB-004
    if not hasattr(raw, "aclose"):
        pytest.skip("backend has no aclose()")
    scripted_summarizer.hold()
    for i in range(4):
        await memory.add_turn(turn(i))
    await scripted_summarizer.wait_for_calls(1)
    if callbacks:
        await slow.wait_for("turns", 1)
    with anyio.fail_after(patient(2)):
        await memory.aclose()
    await asyncio.sleep(0)
    left = _running_since(before)
    assert not left, f"tasks still running after aclose(): {left}"
    scripted_summarizer.release()


@req("CON-003")
@pytest.mark.stm_capability("rolling_summary")
@pytest.mark.parametrize("second", [False, True], ids=["one", "two-at-once"])
async def test_aclose_waits_for_a_call_that_cleans_up_when_cancelled(stm_provider, second):
    """A summarizer that honours its cancellation may still await its cleanup (closing a
    connection): ``aclose()`` returns once that is over, not while the call runs on; so
    does an ``aclose()`` made while another task's is under way."""
    before = set(asyncio.all_tasks())
    started, cleaned = asyncio.Event(), []

    async def summarizer(payload: Any) -> dict[str, str]:
        started.set()
        try:
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0.2)
            cleaned.append(True)
        return {"summary": "never reached"}  # pragma: no cover

    cfg = config(full_zone_turns=1)
    raw = await stm_provider.create(cfg, MemoryKey("t", "u", "cleanup"), summarizer)
    if not hasattr(raw, "aclose"):
        pytest.skip("backend has no aclose()")
    memory = CheckedMemory(raw, cfg, None)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 evicted: a call starts
    with anyio.fail_after(patient(2)):
        await started.wait()
        if second:  # another task's aclose() is under way: this one returns when it ends
            first = asyncio.ensure_future(raw.aclose())
            await asyncio.sleep(0)
        await raw.aclose()
    left = _running_since(before) - ({first} if second else set())
    assert not left and cleaned, (
        f"CON-003: aclose(){' (the second of two)' if second else ''} returned while the "
        f"cancelled summarizer call still ran its cleanup: {left}"
    )
    if second:
        await first


@req("CON-003")
@pytest.mark.stm_capability("rolling_summary")
@pytest.mark.parametrize("health", ["retry", "degraded"])
async def test_aclose_cancels_a_worker_waiting_to_retry(stm_provider, health):
    """Background work is not only a call in flight: a memory closed while it waits out a
    retry backoff (RETRY) or a recovery interval (DEGRADED with a backlog), 30s each,
    leaves no task running either."""
    before = set(asyncio.all_tasks())
    failing = ScriptedSummarizer()
    failing.fail_always("raise")
    cfg = config(
        full_zone_turns=1,
        retry_attempts=2 if health == "retry" else 0,
        retry_backoff_base_s=30.0,
        degraded_retry_interval_s=30.0,
    )
    raw = await stm_provider.create(cfg, MemoryKey("t", "u", f"close-{health}"), failing)
    if not hasattr(raw, "aclose"):
        await stm_provider.dispose(raw)
        pytest.skip("backend has no aclose()")
    try:
        await _fail_into(CheckedMemory(raw, cfg, failing), failing, health)
    except BaseException:
        await stm_provider.dispose(raw)
        raise
    with anyio.fail_after(patient(2)):
        await raw.aclose()
    await asyncio.sleep(0)
    left = _running_since(before)
    running = sorted(map(repr, left))
    await settle_tasks(left)  # not left to the next check
    assert not running, (
        f"CON-003: tasks still running after aclose() in {health.upper()}: {running}"
    )


async def _fail_into(memory: CheckedMemory, failing: ScriptedSummarizer, health: str) -> None:
    """Turns until a failed call takes ``memory`` to ``health``, then one more (evicted
    to the backlog when DEGRADED); then the memory waits out its 30s timer."""
    rule = "HLT-002" if health == "retry" else "HLT-004"
    for i in range(3):
        await memory.add_turn(turn(i))
        if i == 1:
            await failing.wait_for_calls(1)
            await eventually(
                lambda: memory.health.value == health,
                what=f"{rule}: no {health} after a failed call (precondition)",
            )
    await anyio.sleep(0.02)  # the worker gets to its wait
