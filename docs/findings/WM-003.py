"""WM-003: a landing summary clears turns the summarizer never saw.

What happens: PenguiFlow 3.11.2 sends the pending turns to the summarizer and, when the
call returns, sets ``pending = []``. Turns evicted from the recent window while the call
ran are wiped with the others although no summarizer call ever received them.

Spec (WM-003): installing a summary MUST remove from pending exactly the turns sent to the
call that produced it; turns evicted while the call ran MUST stay pending.

Why it matters: with a slow summarizer (any real LLM) and a busy conversation, turns
silently vanish from the agent's memory: they are in neither the summary nor the prompt.
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
    sent: list[str] = []  # every turn any summarizer call received

    async def summarizer(payload: dict) -> dict:
        users = [t["user"] for t in payload["turns"]]
        sent.extend(users)
        await release.wait()
        return {"summary": "covers " + ", ".join(users)}

    config = ShortTermMemoryConfig(
        strategy="rolling_summary", budget=MemoryBudget(full_zone_turns=1)
    )
    memory = DefaultShortTermMemory(config=config, summarizer=summarizer)
    await memory.add_turn(ConversationTurn("u0", "a0"))
    await memory.add_turn(ConversationTurn("u1", "a1"))  # evicts u0: a call starts with [u0]
    await asyncio.sleep(0.01)
    if sent != ["u0"]:
        raise RuntimeError(f"setup: expected one call with ['u0'], got {sent}")
    await memory.add_turn(ConversationTurn("u2", "a2"))  # evicts u1 while the call runs
    await memory.add_turn(ConversationTurn("u3", "a3"))  # evicts u2
    release.set()
    await memory.flush()

    view = (await memory.get_llm_context())["conversation_memory"]
    pending = [t["user"] for t in view.get("pending_turns", [])]
    lost = [u for u in ("u0", "u1", "u2") if u not in sent and u not in pending]
    assert not lost, (
        f"WM-003: turns {lost} were evicted while the call for ['u0'] ran; its summary "
        f"cleared them although no summarizer call received them. View after flush(): {view}"
    )


if __name__ == "__main__":
    asyncio.run(main())
