"""Saves that run to their end whatever happens to their callers (``reference_impl.saves``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from stm_stores import InMemoryStateStore

from reference_impl import ConversationTurn, DefaultShortTermMemory, ShortTermMemoryConfig
from reference_impl.saves import Saves

pytestmark = pytest.mark.anyio


async def test_a_cancelled_caller_stops_waiting_and_wait_sees_the_save_end() -> None:
    saves, done = Saves(), asyncio.Event()

    async def save() -> None:
        await asyncio.sleep(0.05)
        done.set()

    caller = asyncio.ensure_future(saves.run(save()))
    await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert not done.is_set()  # the save runs on
    await saves.wait()
    assert done.is_set()
    await saves.wait()  # nothing left: returns at once


async def test_a_failure_nobody_waits_for_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    saves = Saves()

    async def save() -> None:
        await asyncio.sleep(0.02)
        raise OSError("disk full")

    caller = asyncio.ensure_future(saves.run(save()))
    await asyncio.sleep(0.005)
    caller.cancel()
    with caplog.at_level(logging.WARNING, logger="reference_impl.memory"):
        await saves.wait()
        await asyncio.sleep(0)  # done callbacks run on the next turn of the loop
    assert "a save whose caller was cancelled failed: OSError('disk full')" in caplog.text


async def test_a_failure_its_caller_sees_is_raised_to_it() -> None:
    async def save() -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        await Saves().run(save())


async def _endless_save(saves: Saves) -> asyncio.Future[None]:
    """The caller of a save that runs until cancelled, once the save has started."""
    started = asyncio.Event()

    async def save() -> None:
        started.set()
        await asyncio.sleep(30)

    caller = asyncio.ensure_future(saves.run(save()))
    await started.wait()
    return caller


async def test_wait_cancelled_cancels_the_saves() -> None:
    saves = Saves()
    caller = await _endless_save(saves)
    caller.cancel()
    waiting = asyncio.ensure_future(saves.wait())
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.sleep(0)
    assert not [t for t in asyncio.all_tasks() if "save" in repr(t.get_coro())]


class _SlowStore(InMemoryStateStore):
    """Conditional saves that take a while, so that a second persist starts before the
    first has written."""

    async def save_memory_state_if(
        self, key: str, state: Any, *, expected_revision: int | None
    ) -> None:
        await asyncio.sleep(0.02)
        await super().save_memory_state_if(key, state, expected_revision=expected_revision)


async def test_overlapping_persists_of_one_memory_write_in_call_order() -> None:
    """One memory, the only writer: a persist made while its last one is still writing is
    no stale write. Each expects the revision the one before it wrote, and the newest
    state is the one stored."""
    store = _SlowStore()
    memory = DefaultShortTermMemory(config=ShortTermMemoryConfig(strategy="truncation"))
    await memory.add_turn(ConversationTurn("u1", "a1"))
    first = asyncio.ensure_future(memory.persist(store, "k"))
    await asyncio.sleep(0)
    await memory.add_turn(ConversationTurn("u2", "a2"))
    second = asyncio.ensure_future(memory.persist(store, "k"))
    await asyncio.gather(first, second)
    stored = await store.load_memory_state("k")
    assert stored is not None
    assert [t["user_message"] for t in stored["turns"]] == ["u1", "u2"]
    assert stored["revision"] == memory.to_dict()["revision"] == 2
    await memory.aclose()


async def test_a_store_closing_the_memory_from_inside_its_save_does_not_deadlock() -> None:
    """``aclose()`` waits for the saves under way, but not for the one it is called from
    (a store that closes its memory when it saves): the save, and the persist, end."""
    memory = DefaultShortTermMemory(config=ShortTermMemoryConfig(strategy="truncation"))

    class ClosingStore(InMemoryStateStore):
        async def save_memory_state_if(
            self, key: str, state: Any, *, expected_revision: int | None
        ) -> None:
            await memory.aclose()
            await super().save_memory_state_if(key, state, expected_revision=expected_revision)

    store = ClosingStore()
    await memory.add_turn(ConversationTurn("u", "a"))
    await asyncio.wait_for(memory.persist(store, "k"), 2)
    assert (await store.load_memory_state("k"))["revision"] == 1


async def test_a_save_the_closing_gave_up_on_raises_an_error_not_a_cancellation() -> None:
    """``cancel()`` (a closing that gave up waiting) cancels every save still running; a
    caller that was not cancelled then gets ``RuntimeError``, never a ``CancelledError`` of
    its own, and ``wait()`` returns."""
    saves = Saves()
    caller = await _endless_save(saves)
    saves.cancel()
    with pytest.raises(RuntimeError, match="closed while it ran"):
        await caller
    await asyncio.wait_for(saves.wait(), 1)
