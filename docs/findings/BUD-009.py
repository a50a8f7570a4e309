"""BUD-009: a budget that not even the empty view fits is accepted.

What happens: PenguiFlow 3.11.2 validates each budget field on its own (non-negative,
``summary_max_tokens <= total_max_tokens``) but accepts a ``total_max_tokens`` smaller
than the empty view. Such a memory silently drops every turn it is given: nothing is ever
remembered, and no error says why.

Spec (BUD-009): a memory MUST reject at construction, with ``ValueError``, a budget under
which even the empty view exceeds ``total_max_tokens``.

Why it matters: an unsatisfiable budget is a configuration mistake (a typo, tokens and
characters mixed up); it should fail at start-up, not look like an agent with amnesia.
"""

import asyncio
import json

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
    default_token_estimator,
)


async def main() -> None:
    budget = MemoryBudget(full_zone_turns=5, summary_max_tokens=1, total_max_tokens=2)
    config = ShortTermMemoryConfig(strategy="truncation", budget=budget)
    try:
        memory = DefaultShortTermMemory(config=config)
    except ValueError:
        return  # what the spec requires

    await memory.add_turn(ConversationTurn("My name is Ada.", "Nice to meet you, Ada."))
    view = await memory.get_llm_context()
    size = default_token_estimator(json.dumps(view, sort_keys=True, separators=(",", ":")))
    raise AssertionError(
        f"BUD-009: total_max_tokens=2 was accepted, although the empty view {view} alone is "
        f"{size} tokens; the turn just added was dropped at once"
    )


if __name__ == "__main__":
    asyncio.run(main())
