"""The limits ``make_memory``'s wrapper (``stm_conformance.fixtures.CheckedMemory``) puts on
``add_turn``, on a memory that only waits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stm_conformance import fixtures
from stm_conformance.contract import ShortTermMemoryConfig
from stm_conformance.fixtures import CheckedMemory, PreconditionError


@pytest.fixture(autouse=True)
def _short_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fixtures, "ADD_TURN_LIMIT_S", 0.6)  # the wait on a held call: 0.5 s

    async def no_view(memory: Any) -> None:
        return None  # the view's own checks are not what these tests are about

    monkeypatch.setattr(fixtures, "memory_view", no_view)


class _Waiting:
    """``add_turn`` takes ``seconds`` holding a lock (one at a time), or never returns."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.lock = asyncio.Lock()
        self.added: list[int] = []

    async def add_turn(self, turn: int) -> None:
        async with self.lock:
            if self.seconds is None:
                await asyncio.Event().wait()
            else:
                await asyncio.sleep(self.seconds)
            self.added.append(turn)


def _checked(memory: _Waiting) -> Any:
    return CheckedMemory(memory, ShortTermMemoryConfig(strategy="rolling_summary"))


def test_calls_queued_behind_others_that_end_are_not_blamed() -> None:
    async def main() -> list[int]:
        memory = _Waiting(0.25)
        checked = _checked(memory)
        # The last of eight calls waits 2 s behind the others, over three times the limit.
        await asyncio.gather(*(checked.add_turn(i) for i in range(8)))
        return memory.added

    assert sorted(asyncio.run(main())) == list(range(8))


def test_a_call_that_never_ends_is_blamed_once_the_others_have_ended() -> None:
    async def main() -> None:
        stuck = _Waiting(None)
        checked = _checked(stuck)
        quick = _Waiting(0.05)  # another memory's calls end meanwhile: no excuse
        quick_checked = _checked(quick)
        adds = [quick_checked.add_turn(i) for i in range(10)]
        await asyncio.gather(checked.add_turn(0), *adds)

    with pytest.raises(PreconditionError, match=r"^WM-001: add_turn did not return within"):
        asyncio.run(main())


def test_calls_waiting_on_one_that_never_ends_are_blamed() -> None:
    async def main() -> None:
        memory = _Waiting(None)
        checked = _checked(memory)
        await asyncio.gather(*(checked.add_turn(i) for i in range(3)))

    with pytest.raises(PreconditionError, match=r"^WM-001: add_turn did not return within"):
        asyncio.run(main())


@pytest.mark.parametrize("seconds", [0.05, 0.4], ids=["first wait", "later wait"])
def test_a_cancelled_check_cancels_the_add_turn_it_waits_for(seconds: float) -> None:
    # A check its time limit stops cancels the call it awaits: left running, the call went
    # on after the check had closed the memory, and its error ended the next check.
    async def main() -> list[int]:
        memory = _Waiting(1.0)
        check = asyncio.ensure_future(_checked(memory).add_turn(0))
        await asyncio.sleep(seconds)
        check.cancel()
        with pytest.raises(asyncio.CancelledError):
            await check
        await asyncio.sleep(1.2)  # past the end of the call, had it gone on
        assert not memory.lock.locked()
        return memory.added

    assert asyncio.run(main()) == []
