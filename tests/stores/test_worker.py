"""The SQLite store's worker thread: calls run in order, off the loop; a cancelled caller
still waits for its call; errors reach the caller; an idle thread ends and comes back."""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import pytest
from stm_stores._worker import WorkerThread


def test_calls_run_in_one_other_thread_in_order() -> None:
    worker = WorkerThread("test-worker")
    seen: list[tuple[int, int]] = []

    def call(index: int) -> int:
        seen.append((index, threading.get_ident()))
        return index * 2

    async def main() -> list[int]:
        return await asyncio.gather(*(worker.run(functools.partial(call, i)) for i in range(50)))

    assert asyncio.run(main()) == [i * 2 for i in range(50)]
    assert [index for index, _ in seen] == list(range(50))
    threads = {ident for _, ident in seen}
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_the_call_s_error_reaches_the_caller() -> None:
    worker = WorkerThread("test-worker")

    def fail() -> None:
        raise KeyError("boom")

    async def main() -> None:
        with pytest.raises(KeyError, match="boom"):
            await worker.run(fail)
        assert await worker.run(lambda: "still serving") == "still serving"

    asyncio.run(main())


def test_a_cancelled_caller_waits_for_its_call_then_is_cancelled() -> None:
    worker = WorkerThread("test-worker")
    started, release = threading.Event(), threading.Event()
    effects: list[str] = []

    def slow() -> str:
        started.set()
        release.wait(5)
        effects.append("written")
        return "done"

    async def main() -> None:
        task = asyncio.create_task(worker.run(slow))
        await asyncio.to_thread(started.wait, 5)  # the call runs
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done(), "the caller returned before its call ended"
        task.cancel()  # a second cancel changes nothing either
        await asyncio.sleep(0.01)
        assert not task.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert effects == ["written"]

    asyncio.run(main())


def test_a_cancel_that_lands_as_the_call_ends_still_cancels() -> None:
    worker = WorkerThread("test-worker")
    effects: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        tasks: list[asyncio.Task[None]] = []

        def last_act() -> None:
            effects.append("written")
            # Queued on the loop just before the worker's own wake-up of the caller.
            loop.call_soon_threadsafe(tasks[0].cancel)

        tasks.append(asyncio.create_task(worker.run(last_act)))
        with pytest.raises(asyncio.CancelledError):
            await tasks[0]
        assert effects == ["written"]

    asyncio.run(main())


def test_an_idle_thread_ends_and_the_next_call_starts_another() -> None:
    worker = WorkerThread("test-worker-idle", idle_s=0.05)

    async def main() -> None:
        await worker.run(lambda: None)
        deadline = time.monotonic() + 5
        while any(t.name == "test-worker-idle" for t in threading.enumerate()):
            assert time.monotonic() < deadline, "the idle thread did not end"
            await asyncio.sleep(0.01)
        assert await worker.run(lambda: 7) == 7

    asyncio.run(main())


def test_a_call_whose_loop_closed_does_not_stop_the_thread() -> None:
    worker = WorkerThread("test-worker-orphan")
    release = threading.Event()

    async def abandon() -> None:
        asyncio.get_running_loop().call_soon(lambda: None)
        task = asyncio.create_task(worker.run(lambda: release.wait(5)))
        await asyncio.sleep(0.01)
        task.cancel()  # the loop closes while the call still runs
        # Left pending with its loop on purpose: asyncio would log so when it is collected,
        # in whichever later test that happens.
        task._log_destroy_pending = False

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(abandon())
    finally:
        loop.close()
    release.set()
    time.sleep(0.1)  # the call ends; its caller's loop is gone
    assert any(t.name == "test-worker-orphan" for t in threading.enumerate())

    async def later() -> str:
        return await worker.run(lambda: "served")

    assert asyncio.run(later()) == "served"


def test_a_thread_that_cannot_start_leaves_nothing_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    worker = WorkerThread("test-worker")
    start = threading.Thread.start

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    async def main() -> None:
        monkeypatch.setattr(threading.Thread, "start", refuse)
        with pytest.raises(RuntimeError, match="can't start"):
            await worker.run(lambda: "lost")
        assert worker._inbox is None  # nothing queued for a thread believed to run
        monkeypatch.setattr(threading.Thread, "start", start)
        assert await asyncio.wait_for(worker.run(lambda: "served"), 5) == "served"

    asyncio.run(main())


def test_stop_ends_the_thread_after_the_calls_queued_before_it() -> None:
    worker = WorkerThread("test-worker-stop")
    release = threading.Event()
    order: list[str] = []

    def first() -> None:
        release.wait(5)
        order.append("first")

    async def main() -> None:
        queued = asyncio.create_task(worker.run(first))
        await asyncio.sleep(0.01)
        worker.stop()
        later = asyncio.create_task(worker.run(lambda: order.append("later")))
        await asyncio.sleep(0.05)
        assert order == [], "a call queued after the stop ran before one queued before it"
        release.set()
        await asyncio.gather(queued, later)
        assert sorted(order) == ["first", "later"]
        worker.stop()
        deadline = time.monotonic() + 5
        while any(t.name == "test-worker-stop" for t in threading.enumerate()):
            assert time.monotonic() < deadline, "the stopped thread did not end"
            await asyncio.sleep(0.01)

    asyncio.run(main())
