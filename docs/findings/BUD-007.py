"""BUD-007: an oversize summary is installed instead of refused as a failed call.

What happens: when the summarizer returns a summary over ``summary_max_tokens``, PenguiFlow
3.11.2 installs it anyway. With ``truncate_oldest`` it keeps the last characters (usually
starting mid-word) and reports HEALTHY. With ``overflow_policy="error"`` it installs the
whole oversize summary, then raises ``MemoryBudgetExceeded`` inside the background task,
which the next ``flush()`` re-raises to its caller.

Spec (BUD-007): a summary whose size exceeds ``summary_max_tokens`` MUST be treated as a
summarizer failure (nothing is installed; the call counts towards RETRY and DEGRADED); it
never raises into a caller or a background task.

Why it matters: a verbose LLM answer is a summarizer fault. Cutting it keeps an arbitrary
tail of it (the head, often the oldest facts, is gone); raising it breaks ``flush()``.
"""

import asyncio

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
)

OVERSIZE = "The user is Ada, she lives in Paris and prefers email. " * 8  # ~110 tokens


async def run(policy: str) -> list[str]:
    async def summarizer(payload: dict) -> dict:
        return {"summary": OVERSIZE}

    budget = MemoryBudget(full_zone_turns=1, summary_max_tokens=20, overflow_policy=policy)
    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=budget,
        retry_attempts=0,  # one failure degrades
    )
    memory = DefaultShortTermMemory(config=config, summarizer=summarizer)
    await memory.add_turn(ConversationTurn("u0", "a0"))
    await memory.add_turn(ConversationTurn("u1", "a1"))
    problems = []
    try:
        await memory.flush()
    except Exception as exc:
        problems.append(f"flush() raised {type(exc).__name__}({exc})")
    summary = (await memory.get_llm_context())["conversation_memory"].get("summary")
    if summary:
        problems.append(f"installed {summary[:24]!r}... ({len(summary)} chars)")
    if problems:
        problems.append(f"health {memory.health.value}")
    return [f"{policy}: " + ", ".join(problems)] if problems else []


async def main() -> None:
    problems = await run("truncate_oldest") + await run("error")
    assert not problems, "BUD-007: an oversize summary was not treated as a failure: " + (
        "; ".join(problems)
    )


if __name__ == "__main__":
    asyncio.run(main())
