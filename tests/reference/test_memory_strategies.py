"""The three strategies of the reference memory and how turns render (group STR)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from support import blocked_summarizer

from reference_impl import (
    ConversationTurn,
    DefaultShortTermMemory,
    LengthBasedEstimator,
    MemoryBudget,
    MemoryHealth,
    ShortTermMemory,
    ShortTermMemoryConfig,
    TrajectoryDigest,
)

DIGEST = TrajectoryDigest(
    tools_invoked=["search", "calc"],
    observations_summary="2 results",
    reasoning_summary=None,
    artifacts_refs=["artifact://r/1"],
)


def make_turn(index: int, digest: TrajectoryDigest | None = None) -> ConversationTurn:
    return ConversationTurn(
        user_message=f"u{index}",
        assistant_response=f"a{index}",
        trajectory_digest=digest,
        artifacts_shown={"hidden": "from the view"},
        artifacts_hidden_refs=["ref"],
        ts=float(index),
    )


@pytest.mark.requirement("HLT-001")
def test_memory_implements_the_protocol() -> None:
    memory = DefaultShortTermMemory(config=ShortTermMemoryConfig())
    assert isinstance(memory, ShortTermMemory)
    assert memory.health is MemoryHealth.HEALTHY


@pytest.mark.requirement("STR-003")
def test_rolling_summary_requires_a_summarizer() -> None:
    with pytest.raises(ValueError):
        DefaultShortTermMemory(config=ShortTermMemoryConfig(strategy="rolling_summary"))


@pytest.mark.anyio
@pytest.mark.requirement("STR-001", "BUD-008")
@pytest.mark.parametrize("estimator", [None, LengthBasedEstimator(1), len])
async def test_strategy_none_stores_nothing(estimator: Any) -> None:
    memory = DefaultShortTermMemory(config=ShortTermMemoryConfig(token_estimator=estimator))
    for index in range(3):
        await memory.add_turn(make_turn(index, DIGEST))
    assert await memory.get_llm_context() == {}
    assert memory.estimate_tokens() == (estimator or (lambda s: len(s) // 4 + 1))("{}")
    state = memory.to_dict()
    assert state["turns"] == state["pending"] == state["backlog"] == []
    await memory.flush()
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("STR-002", "BUD-003")
@pytest.mark.parametrize("full_zone_turns", [0, 1, 3])
async def test_truncation_shows_exactly_the_last_full_zone_turns(full_zone_turns: int) -> None:
    config = ShortTermMemoryConfig(
        strategy="truncation", budget=MemoryBudget(full_zone_turns=full_zone_turns)
    )
    memory = DefaultShortTermMemory(config=config)
    for index in range(6):
        await memory.add_turn(make_turn(index))
        view = await memory.get_llm_context()
        shown = [t["user"] for t in view["conversation_memory"]["recent_turns"]]
        newest = [f"u{i}" for i in range(max(0, index + 1 - full_zone_turns), index + 1)]
        assert shown == newest
        assert set(view["conversation_memory"]) == {"recent_turns"}
    assert memory.to_dict()["pending"] == []
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("STR-004")
@pytest.mark.parametrize("strategy", ["truncation", "rolling_summary"])
@pytest.mark.parametrize("include", [True, False])
async def test_turn_renders_with_digest_exactly_when_it_has_one_and_it_is_included(
    strategy: str, include: bool
) -> None:
    config = ShortTermMemoryConfig(
        strategy=strategy,  # type: ignore[arg-type]
        budget=MemoryBudget(full_zone_turns=2),
        include_trajectory_digest=include,
    )
    memory = DefaultShortTermMemory(config=config, summarizer=blocked_summarizer)
    await memory.add_turn(make_turn(0, DIGEST))
    await memory.add_turn(make_turn(1))
    await memory.add_turn(make_turn(2, DIGEST))  # under rolling_summary, u0 becomes pending
    view = (await memory.get_llm_context())["conversation_memory"]
    rendered_digest = {
        "tools_invoked": ["search", "calc"],
        "observations_summary": "2 results",
        "reasoning_summary": None,
        "artifacts_refs": ["artifact://r/1"],
    }

    def expected(index: int, has_digest: bool) -> dict[str, Any]:
        turn: dict[str, Any] = {"user": f"u{index}", "assistant": f"a{index}"}
        if has_digest and include:
            turn["trajectory_digest"] = rendered_digest
        return turn

    assert view["recent_turns"] == [expected(1, False), expected(2, True)]
    if strategy == "rolling_summary":
        assert view["pending_turns"] == [expected(0, True)]
    # The digest is still stored either way: it is only left out of the view.
    assert memory.to_dict()["turns"][1]["trajectory_digest"] is not None
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("STR-003")
async def test_rolling_summary_view_shape() -> None:
    async def summarize(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"summary": "the story so far"}

    config = ShortTermMemoryConfig(
        strategy="rolling_summary", budget=MemoryBudget(full_zone_turns=1)
    )
    memory = DefaultShortTermMemory(config=config, summarizer=summarize)
    assert await memory.get_llm_context() == {"conversation_memory": {"recent_turns": []}}
    await memory.add_turn(make_turn(0))
    await memory.add_turn(make_turn(1))
    await memory.flush()
    assert await memory.get_llm_context() == {
        "conversation_memory": {
            "summary": "the story so far",
            "recent_turns": [{"user": "u1", "assistant": "a1"}],
        }
    }
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("STR-003")
async def test_callers_may_mutate_the_view_they_get() -> None:
    config = ShortTermMemoryConfig(strategy="truncation")
    memory = DefaultShortTermMemory(config=config)
    await memory.add_turn(make_turn(0, DIGEST))
    view = await memory.get_llm_context()
    view["conversation_memory"]["recent_turns"][0]["trajectory_digest"]["tools_invoked"].append("x")
    view["conversation_memory"]["recent_turns"].clear()
    again = await memory.get_llm_context()
    assert again["conversation_memory"]["recent_turns"][0]["trajectory_digest"][
        "tools_invoked"
    ] == [
        "search",
        "calc",
    ]
    await memory.aclose()
