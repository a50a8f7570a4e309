"""A token estimator that raises on a whole view (a tokenizer's input limit), though not on
the parts it measured before: the failure is reported, nothing is lost, and the memory
goes on (the summarizer worker does not end with it)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from reference_impl import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
)

pytestmark = pytest.mark.anyio

LIMIT = 400


def estimator(text: str) -> int:
    if len(text) > LIMIT:
        raise ValueError("input too long for the tokenizer")
    return len(text) // 4 + 1


async def test_add_turn_reports_the_failure_and_the_turn_stays_stored() -> None:
    added: list[str] = []

    async def on_turn_added(turn: ConversationTurn) -> None:
        added.append(turn.user_message)

    config = ShortTermMemoryConfig(
        strategy="truncation",
        budget=MemoryBudget(full_zone_turns=10, total_max_tokens=1000),
        token_estimator=estimator,
        on_turn_added=on_turn_added,
    )
    memory = DefaultShortTermMemory(config=config)
    await memory.add_turn(ConversationTurn("hi", "there"))
    with pytest.raises(ValueError, match="too long"):
        await memory.add_turn(ConversationTurn("x" * 300, "y" * 200))
    await asyncio.sleep(0.01)
    assert [t["user_message"][:2] for t in memory.to_dict()["turns"]] == ["hi", "xx"]
    assert added == ["hi", "x" * 300]  # reported as stored, once (CB-001)
    await memory.aclose()


async def test_the_worker_survives_a_view_it_cannot_measure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def summarizer(payload: object) -> dict[str, str]:
        return {"summary": "s" * 380}  # measured alone: fine; in the view: too long

    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=1, summary_max_tokens=200, total_max_tokens=1000),
        token_estimator=estimator,
    )
    memory = DefaultShortTermMemory(config=config, summarizer=summarizer)
    with caplog.at_level(logging.ERROR, logger="reference_impl.memory"):
        await memory.add_turn(ConversationTurn("a", "b"))
        await memory.add_turn(ConversationTurn("c", "d"))  # a evicted: summarized
        await asyncio.wait_for(memory.flush(), 5)
    assert "token_estimator raised bringing the view within budget" in caplog.text
    assert "worker crashed" not in caplog.text
    assert memory.to_dict()["summary"] == "s" * 380
    await memory.aclose()
