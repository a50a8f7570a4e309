"""BUD-005: shortening the summary never ends when the summary is within its own limit.

What happens: under ``overflow_policy="truncate_summary"``, PenguiFlow 3.11.2's budget loop
shortens the summary only while the summary alone exceeds ``summary_max_tokens``. When the
view is over ``total_max_tokens`` but the summary is within its own limit (the usual case:
a summary that fitted, then turns came), the loop shortens nothing and goes round again,
for ever: ``add_turn`` never returns and the event loop is blocked.

Spec (BUD-005): policy ``truncate_summary``: while over budget, shorten the summary first
(keeping its newest text), then proceed as ``truncate_oldest``. It MUST terminate.

Why it matters: one turn of a long conversation freezes the whole process (every other
session served by the same event loop with it), not just the memory.
"""

import asyncio
import threading

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
)


async def scenario(done: list[str]) -> None:
    calls = 0

    async def summarizer(payload: dict) -> dict:
        nonlocal calls
        calls += 1
        if calls > 1:
            await asyncio.Event().wait()  # later calls never answer: the budget acts alone
        return {"summary": "s" * 400}  # about 100 tokens: within summary_max_tokens=120

    budget = MemoryBudget(
        full_zone_turns=2,
        summary_max_tokens=120,
        total_max_tokens=200,
        overflow_policy="truncate_summary",
    )
    memory = DefaultShortTermMemory(
        config=ShortTermMemoryConfig(strategy="rolling_summary", budget=budget),
        summarizer=summarizer,
    )
    for i in range(3):
        await memory.add_turn(ConversationTurn(f"u{i}" + "x" * 100, f"a{i}"))
    await memory.flush()
    if not memory.to_dict()["summary"]:
        raise RuntimeError("setup: the first summary was not installed")
    for i in range(3, 6):
        await memory.add_turn(ConversationTurn(f"u{i}" + "x" * 100, f"a{i}"))
        done.append(f"u{i}")


def main() -> None:
    done: list[str] = []
    # In a thread of its own: on PenguiFlow 3.11.2 the loop never gives control back.
    worker = threading.Thread(target=lambda: asyncio.run(scenario(done)), daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), (
        f"BUD-005: under truncate_summary, add_turn did not return within 5 s once the view "
        f"went over total_max_tokens with the summary within summary_max_tokens (turns "
        f"added: {done}); the budget loop shortens nothing and never ends"
    )


if __name__ == "__main__":
    main()
