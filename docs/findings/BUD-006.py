"""BUD-006: under overflow_policy="error" a refused turn stays in memory.

What happens: PenguiFlow 3.11.2's ``add_turn()`` appends the turn (and fires
``on_turn_added``) before it checks the budget. With ``overflow_policy="error"`` it then
raises ``MemoryBudgetExceeded``, but the turn it refused is already stored: the view now
exceeds ``total_max_tokens`` and every later call sees it.

Spec (BUD-006): policy ``error``: ``add_turn`` MUST raise ``MemoryBudgetExceeded`` when the
resulting view would exceed ``total_max_tokens``, and leave state exactly as before the call
(view, tokens, ``to_dict()``, no callback, no summarizer call).

Why it matters: a caller who catches the error (to shorten the turn, or to report it)
finds the memory over budget anyway, and observers were told of a turn that was refused.
"""

import asyncio

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    MemoryBudgetExceeded,
    ShortTermMemoryConfig,
)


async def main() -> None:
    notified: list[str] = []

    async def on_turn_added(turn: ConversationTurn) -> None:
        notified.append(turn.user_message)

    budget = MemoryBudget(
        full_zone_turns=2, summary_max_tokens=20, total_max_tokens=60, overflow_policy="error"
    )
    config = ShortTermMemoryConfig(
        strategy="truncation", budget=budget, on_turn_added=on_turn_added
    )
    memory = DefaultShortTermMemory(config=config)
    await memory.add_turn(ConversationTurn("u0", "ok"))
    await asyncio.sleep(0)
    before = (await memory.get_llm_context(), memory.estimate_tokens(), list(notified))

    try:
        await memory.add_turn(ConversationTurn("u1", "too long " * 50))
    except MemoryBudgetExceeded:
        pass
    else:
        raise RuntimeError("setup: the oversize turn was accepted without an error")
    await asyncio.sleep(0)
    after = (await memory.get_llm_context(), memory.estimate_tokens(), list(notified))

    assert after == before, (
        f"BUD-006: add_turn raised MemoryBudgetExceeded but kept the refused turn: "
        f"{after[1]} tokens (limit 60, was {before[1]}), on_turn_added ran for {after[2]}"
    )


if __name__ == "__main__":
    asyncio.run(main())
