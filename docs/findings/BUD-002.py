"""BUD-002: a loaded summary larger than summary_max_tokens is kept as it is.

What happens: PenguiFlow 3.11.2 checks a summary against ``summary_max_tokens`` only when
a summarizer call returns it. ``from_dict()`` (and so ``hydrate()``) installs the stored
summary unchecked, so a state written under a larger budget puts an oversize summary into
a memory configured with a smaller one.

Spec (BUD-002): the size of the installed summary MUST NOT exceed ``summary_max_tokens``.
That holds right after a load too: an oversize stored summary is clipped or refused.

Why it matters: lowering the summary budget (to make room for turns or to cut cost) does
not apply to any conversation restored from the store; those prompts keep the old size.
"""

import asyncio

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
    default_token_estimator,
)


def make(summary_max_tokens: int, summarizer) -> DefaultShortTermMemory:
    budget = MemoryBudget(full_zone_turns=1, summary_max_tokens=summary_max_tokens)
    config = ShortTermMemoryConfig(strategy="rolling_summary", budget=budget)
    return DefaultShortTermMemory(config=config, summarizer=summarizer)


async def main() -> None:
    async def summarizer(payload: dict) -> dict:
        return {"summary": "fact " * 80}  # about 100 tokens

    # Yesterday's deployment: the default budget of 1000 summary tokens.
    old = make(1000, summarizer)
    await old.add_turn(ConversationTurn("u0", "a0"))
    await old.add_turn(ConversationTurn("u1", "a1"))
    await old.flush()
    state = old.to_dict()

    # Today's deployment restores it with a 10-token summary budget.
    new = make(10, summarizer)
    new.from_dict(state)
    summary = (await new.get_llm_context())["conversation_memory"].get("summary", "")
    size = default_token_estimator(summary) if summary else 0
    assert size <= 10, (
        f"BUD-002: the loaded summary is {size} tokens, over summary_max_tokens=10; "
        "from_dict() installed it unclipped"
    )


if __name__ == "__main__":
    asyncio.run(main())
