"""Providers for the kit's meta-tests that are not broken backends.

- :func:`restricted`: the reference backend declaring only ``$STM_TEST_CAPABILITIES``
  (comma-separated), to show each level is reachable with exactly its capabilities.
- :data:`broken_reference`: the reference backend after a wrong change to the reference
  itself (a summary install clears every pending turn). The differential must still catch
  it: its oracle is the kit's model, not the reference.
- :func:`slow_reference`: the reference backend taking ``$STM_TEST_ADD_TURN_DELAY_S``
  seconds more for every ``add_turn``, as a backend on a network store does: a correct
  backend that is only slow must pass.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from typing import Any

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.provider import provider as reference_provider
from stm_conformance.provider import Provider

__all__ = ["broken_reference", "racy", "restricted", "slow_reference", "sticky_after_first"]


def restricted() -> Provider:
    """The reference provider declaring only the capabilities named by the environment."""
    names = os.environ.get("STM_TEST_CAPABILITIES", "")
    capabilities = frozenset(name for name in names.split(",") if name)
    return dataclasses.replace(
        reference_provider,
        name=f"reference-only-{'+'.join(sorted(capabilities)) or 'none'}",
        capabilities=capabilities,
    )


def broken_reference() -> Provider:
    """Break the reference module itself, then return the unchanged reference provider."""
    original = watermark.install

    def install(state: MemoryState, batch: watermark.Batch, summary: str) -> None:
        original(state, batch, summary)
        state.pending.clear()  # the wrong change: turns evicted during the call are lost
        state.visible_from = state.visible_size = 0

    watermark.install = install
    return dataclasses.replace(reference_provider, name="reference-broken-in-place")


def racy() -> Provider:
    """The reference, except that the third memory it makes in a process counts one token
    too many: a failure that does not come back when the same operations run again, as a
    race in a real backend would not."""
    from reference_impl.memory import DefaultShortTermMemory

    made = 0

    class OffByOneOnce(DefaultShortTermMemory):
        def estimate_tokens(self) -> int:
            return super().estimate_tokens() + 1

    async def create(config: Any, key: Any, summarizer: Any) -> Any:
        nonlocal made
        made += 1
        memory_class = OffByOneOnce if made == 3 else DefaultShortTermMemory
        return memory_class(config=config, summarizer=summarizer, key=key)

    return dataclasses.replace(reference_provider, name="reference-racy", create=create)


def sticky_after_first() -> Provider:
    """The reference, except that every memory after the first it makes in a process keeps
    its count of failed calls through a recovery (HLT-004): the differential's script with
    exceptions, which runs first, matches the model, and the bug shows only in the runs
    after it, as a bug whose timing varies from run to run may."""
    from reference_impl.health import Transition
    from reference_impl.memory import DefaultShortTermMemory
    from reference_impl.types import MemoryHealth

    made = 0

    class StickyCount(DefaultShortTermMemory):
        def _transition(self, change: Transition) -> None:
            if change == (MemoryHealth.RECOVERING, MemoryHealth.HEALTHY):
                self._state.health.failures = self._config.retry_attempts + 1
            super()._transition(change)

    async def create(config: Any, key: Any, summarizer: Any) -> Any:
        nonlocal made
        made += 1
        memory_class = StickyCount if made > 1 else DefaultShortTermMemory
        return memory_class(config=config, summarizer=summarizer, key=key)

    return dataclasses.replace(
        reference_provider, name="reference-sticky-after-first", create=create
    )


def slow_reference() -> Provider:
    """The reference, waiting ``$STM_TEST_ADD_TURN_DELAY_S`` seconds (a round trip to a
    store) at the start of every ``add_turn``."""
    from reference_impl.memory import DefaultShortTermMemory

    delay = float(os.environ["STM_TEST_ADD_TURN_DELAY_S"])

    class SlowAddTurn(DefaultShortTermMemory):
        async def add_turn(self, turn: Any) -> None:
            await asyncio.sleep(delay)
            await super().add_turn(turn)

    async def create(config: Any, key: Any, summarizer: Any) -> Any:
        return SlowAddTurn(config=config, summarizer=summarizer, key=key)

    return dataclasses.replace(
        reference_provider, name=f"reference-slowed-{delay:g}s", create=create
    )
