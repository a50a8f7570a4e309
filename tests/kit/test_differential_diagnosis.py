"""What the differential state machine says when a backend's summarizer call outlives a
``from_dict`` that replaced its state: the requirement, and the cause."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import pytest

from reference_impl.memory import DefaultShortTermMemory, SummarizerFn
from reference_impl.provider import provider as reference_provider
from reference_impl.types import MemoryKey, ShortTermMemoryConfig, Summarizer
from stm_conformance.stateful import MemoryDifferential, requirement_of


class LateCallMemory(DefaultShortTermMemory):
    """The reference, but a summarizer call starts only once ``from_dict`` has replaced
    the state, and reaches the summarizer all the same: the replaced state's call, made
    after ``from_dict`` returned."""

    def __init__(self, **kwargs: Any) -> None:
        self._replaced = asyncio.Event()
        super().__init__(**kwargs)

    def _unless_replaced(self, summarizer: SummarizerFn) -> SummarizerFn:
        async def late(payload: Mapping[str, Any]) -> Mapping[str, Any]:
            await self._replaced.wait()
            return await summarizer(payload)

        return late

    def from_dict(self, state: Mapping[str, Any]) -> None:
        super().from_dict(state)
        self._replaced.set()


async def _create(config: ShortTermMemoryConfig, key: MemoryKey, summarizer: Summarizer) -> Any:
    return LateCallMemory(config=config, summarizer=summarizer, key=key)


class Differential(MemoryDifferential):
    provider = dataclasses.replace(reference_provider, name="late-call", create=_create)
    variant: ClassVar[Mapping[str, Any]] = MappingProxyType(
        {"full_zone_turns": 0, "total_max_tokens": 0}
    )


def test_a_call_reaching_the_summarizer_after_from_dict_is_blamed_with_its_cause() -> None:
    machine = Differential()
    try:
        machine.create(dict(Differential.variant))
        machine.add("", "a", None)  # u0 pending: its call waits for a from_dict
        machine.agrees_with_the_model()
        machine.reload()  # ... and reaches the summarizer after it
        machine.agrees_with_the_model()
        machine.summarize()  # the loaded state sends u0 again
        with pytest.raises(AssertionError) as failed:
            machine.agrees_with_the_model()
    finally:
        machine.teardown()
    assert requirement_of(failed.value) == "WM-004"
    message = str(failed.value)
    assert "Call #1, made after from_dict() returned, succeeded with the same first turn" in message
    assert "this one (call #2)" in message


def test_the_reference_is_not_blamed_on_the_same_steps() -> None:
    class Reference(Differential):
        provider = reference_provider

    machine = Reference()
    try:
        machine.create(dict(Reference.variant))
        for step in (lambda: machine.add("", "a", None), machine.reload, machine.summarize):
            step()
            machine.agrees_with_the_model()
    finally:
        machine.teardown()
    assert machine.model is not None and not machine.model.pending
