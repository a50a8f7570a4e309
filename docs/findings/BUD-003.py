"""BUD-003: a state loaded into a memory with a smaller window keeps every recent turn.

What happens: PenguiFlow 3.11.2's ``from_dict`` copies the state's recent turns as they
are. Loaded into a memory whose ``full_zone_turns`` is smaller than the one that wrote
the state (a deployment that lowered the window and restores its sessions), the view
shows more recent turns than the window allows, until enough new turns push them out.

Spec (BUD-003): recent MUST hold at most ``full_zone_turns`` turns (after every
operation, ``from_dict`` included); a turn evicted from recent becomes pending (WM-002).

Why it matters: the window is how an operator bounds the verbatim part of every prompt;
after a restore it silently does not hold.
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

    def memory(window: int) -> DefaultShortTermMemory:
        config = ShortTermMemoryConfig(
            strategy="rolling_summary", budget=MemoryBudget(full_zone_turns=window)
        )
        return DefaultShortTermMemory(config=config, summarizer=summarizer)

    wide = memory(3)
    for i in range(3):
        await wide.add_turn(ConversationTurn(f"u{i}", f"a{i}"))
    narrow = memory(1)
    narrow.from_dict(wide.to_dict())
    view = (await narrow.get_llm_context())["conversation_memory"]
    recent = [t["user"] for t in view.get("recent_turns", [])]
    gate.set()
    assert len(recent) <= 1, (
        f"BUD-003: after from_dict the view holds {len(recent)} recent turns {recent}, "
        "but full_zone_turns=1"
    )


if __name__ == "__main__":
    asyncio.run(main())
