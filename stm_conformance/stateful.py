"""A differential state machine: the backend under test and the reference, side by side.

``MemoryDifferential`` drives two memories with the same operations and the same scripted
summarizer behaviour and, after every step, requires the same view, health and token count.

Model assumptions (what a backend may differ on without failing):

- Summarizers are *held* between steps: a background call may start at any time, but it
  completes only inside the ``summarize``, ``fail_round`` and ``recover`` steps, which run
  both memories to quiescence (``flush()`` or a recovered health) before comparing.
- While degraded, summarizers are released only by ``recover``: recovery attempts are
  driven by a timer, so releasing them elsewhere would let one memory recover and not the
  other depending on scheduling, not on behaviour.
- DEGRADED and RECOVERING compare equal: when a recovery attempt starts is timing, and both
  states show the same view (recent turns only).
- ``restore`` (with capability ``serialization``) round-trips each memory through its own
  ``to_dict()``; formats are never compared across the two.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryKey, ShortTermMemoryConfig

from ._deadline import CLOSE_TIMEOUT_S, close_runner, run_bounded
from .checks import config, turn
from .provider import Provider
from .scripted import ScriptedSummarizer

__all__ = ["MemoryDifferential", "differential_config"]

_DEGRADED_FAMILY = {"degraded", "recovering"}


def differential_config(**overrides: Any) -> ShortTermMemoryConfig:
    """The configuration the differential machine runs with unless a subclass overrides it."""
    params: dict[str, Any] = {
        "full_zone_turns": 2,
        "total_max_tokens": 160,
        "summary_max_tokens": 60,
        "retry_attempts": 1,
        "retry_backoff_base_s": 0.001,
        "degraded_retry_interval_s": 0.005,
        "recovery_backlog_limit": 4,
    }
    params.update(overrides)
    return config("rolling_summary", **params)


class MemoryDifferential(RuleBasedStateMachine):
    """Subclass with ``provider`` (and optionally ``memory_config``) set, then run it with
    ``hypothesis.stateful.run_state_machine_as_test``."""

    provider: ClassVar[Provider]
    memory_config: ClassVar[ShortTermMemoryConfig | None] = None
    serialization: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.cfg = self.memory_config or differential_config()
        self.key = MemoryKey("differential", "user", "session")
        self.runner = asyncio.Runner()
        self.sut_summarizer = ScriptedSummarizer(max_chars=200)
        self.ref_summarizer = ScriptedSummarizer(max_chars=200)
        for s in (self.sut_summarizer, self.ref_summarizer):
            s.hold()
        self.sut: Any = self._run(self.provider.create(self.cfg, self.key, self.sut_summarizer))
        self.ref = DefaultShortTermMemory(
            config=self.cfg, summarizer=self.ref_summarizer, key=self.key
        )
        self.turns = 0

    def _run(self, coro: Any) -> Any:
        return run_bounded(self.runner, coro)

    def _both(self, method: str) -> None:
        async def go() -> None:
            await getattr(self.sut, method)()
            await getattr(self.ref, method)()

        self._run(go())

    def _summarizers(self, action: str, *args: Any) -> None:
        for s in (self.sut_summarizer, self.ref_summarizer):
            getattr(s, action)(*args)

    @rule(pad=st.integers(0, 40), digest=st.booleans())
    def add(self, pad: int, digest: bool) -> None:
        t = turn(self.turns, pad=pad, digest=digest)
        self.turns += 1

        async def go() -> None:
            await self.sut.add_turn(t)
            await self.ref.add_turn(t)
            await asyncio.sleep(0)

        self._run(go())

    @precondition(lambda self: self.ref.health.value not in _DEGRADED_FAMILY)
    @rule()
    def summarize(self) -> None:
        self._summarizers("release")
        self._both("flush")
        self._summarizers("hold")

    @precondition(lambda self: self.ref.health.value not in _DEGRADED_FAMILY)
    @rule()
    def fail_round(self) -> None:
        self._summarizers("fail_always", "raise")
        self._summarizers("release")
        self._both("flush")
        self._summarizers("succeed")
        self._summarizers("hold")

    @precondition(lambda self: self.ref.health.value in _DEGRADED_FAMILY)
    @rule()
    def recover(self) -> None:
        if not self.ref.to_dict()["backlog"]:
            return  # nothing to recover with: both stay degraded
        self._summarizers("release")

        async def settle() -> None:
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                if "healthy" == self.ref.health.value == self.sut.health.value:
                    return
                await asyncio.sleep(0.002)

        self._run(settle())
        self._summarizers("hold")

    @precondition(lambda self: self.serialization)
    @rule()
    def restore(self) -> None:
        async def go() -> None:
            sut_state = json.loads(json.dumps(self.sut.to_dict()))
            ref_state = json.loads(json.dumps(self.ref.to_dict()))
            new_sut = await self.provider.create(self.cfg, self.key, self.sut_summarizer)
            new_sut.from_dict(sut_state)
            await self.provider.dispose(self.sut)
            await self.ref.aclose()
            self.sut = new_sut
            self.ref = DefaultShortTermMemory(
                config=self.cfg, summarizer=self.ref_summarizer, key=self.key
            )
            self.ref.from_dict(ref_state)

        self._run(go())

    @invariant()
    def same_observable_state(self) -> None:
        async def observe(memory: Any) -> tuple[str, str, int]:
            view = json.dumps(dict(await memory.get_llm_context()), sort_keys=True)
            health = memory.health.value
            health = "degraded" if health in _DEGRADED_FAMILY else health
            return view, health, memory.estimate_tokens()

        async def go() -> tuple[Any, Any]:
            return await observe(self.sut), await observe(self.ref)

        sut, ref = self._run(go())
        assert sut == ref, f"backend and reference differ:\n  backend:   {sut}\n  reference: {ref}"

    def teardown(self) -> None:
        self._summarizers("release")

        async def go() -> None:
            await self.provider.dispose(self.sut)
            await self.ref.aclose()

        try:
            run_bounded(self.runner, go(), seconds=CLOSE_TIMEOUT_S, what="teardown")
        finally:
            close_runner(self.runner)
