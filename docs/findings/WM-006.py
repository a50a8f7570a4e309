"""WM-006: budget enforcement deletes pending turns that no summary covers.

What happens: when the view is over ``total_max_tokens``, PenguiFlow 3.11.2 (policies
``truncate_oldest`` and ``truncate_summary``) pops the oldest pending turns for good. They
were evicted from the recent window but not yet summarized, so they are lost.

Spec (WM-006): no turn may be discarded without a summary covering it, except on the
DEGRADED backlog overflow path. Budget trimming MAY omit the oldest pending turns from the
view while they wait; it MUST NOT delete them.

Why it matters: a tight prompt budget should shorten what the model sees now, not erase
facts before the summarizer could fold them into the summary.
"""

import asyncio

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
)


async def main() -> None:
    release = asyncio.Event()

    async def summarizer(payload: dict) -> dict:
        await release.wait()  # a slow LLM: nothing is summarized during the check
        return {"summary": "s"}

    budget = MemoryBudget(full_zone_turns=2, summary_max_tokens=40, total_max_tokens=60)
    config = ShortTermMemoryConfig(strategy="rolling_summary", budget=budget)
    memory = DefaultShortTermMemory(config=config, summarizer=summarizer)
    added = [f"u{i}" for i in range(8)]
    for user in added:
        await memory.add_turn(ConversationTurn(user, "a"))

    state = memory.to_dict()
    kept = [t["user_message"] for t in state["pending"] + state["turns"]]
    deleted = [u for u in added if u not in kept]
    release.set()
    assert not deleted, (
        f"WM-006: budget trimming deleted un-summarized turns {deleted}; "
        f"pending is now {[t['user_message'] for t in state['pending']]}, "
        f"summary {state['summary']!r}"
    )


if __name__ == "__main__":
    asyncio.run(main())
