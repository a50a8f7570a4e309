"""BUD-001: a state loaded into a memory with a smaller token budget stays over it.

What happens: PenguiFlow 3.11.2's ``from_dict`` copies the state's pending turns as they
are and trims nothing. Loaded into a memory whose ``total_max_tokens`` is smaller than
the one that wrote the state (a deployment that lowered the budget and restores its
sessions), the view is over the limit, by the memory's own ``estimate_tokens()``, until
the next ``add_turn`` trims it.

Spec (BUD-001): after every operation (``from_dict`` included), with a token limit and a
truncate policy, ``estimate_tokens() <= total_max_tokens``.

Why it matters: the budget is how an operator bounds every prompt; the first prompt after
a restore is built from an over-budget view.
"""

import asyncio

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
)


async def main() -> None:
    gate = asyncio.Event()

    async def summarizer(payload: dict) -> dict:
        await gate.wait()  # held: evicted turns stay pending
        return {"summary": "s"}

    def memory(total: int) -> DefaultShortTermMemory:
        budget = MemoryBudget(full_zone_turns=1, total_max_tokens=total, summary_max_tokens=20)
        config = ShortTermMemoryConfig(strategy="rolling_summary", budget=budget)
        return DefaultShortTermMemory(config=config, summarizer=summarizer)

    wide = memory(100_000)
    for i in range(6):
        await wide.add_turn(ConversationTurn(f"u{i}" + "x" * 60, f"a{i}"))
    narrow = memory(60)
    narrow.from_dict(wide.to_dict())
    tokens = narrow.estimate_tokens()
    gate.set()
    if wide.estimate_tokens() <= 60:
        raise RuntimeError("setup: the state written fits the smaller budget already")
    assert tokens <= 60, (
        f"BUD-001: after from_dict the memory's own estimate_tokens() is {tokens}, over "
        "total_max_tokens=60"
    )


if __name__ == "__main__":
    asyncio.run(main())
