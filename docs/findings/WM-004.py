"""WM-004: from_dict during a summarizer call lets a second call run beside it.

What happens: PenguiFlow 3.11.2's ``from_dict`` sets ``_summarize_task = None`` without
stopping the call in flight. The next ``add_turn`` sees no task and starts another
summarizer call while the first one is still running.

Spec (WM-004): at most one summarizer call per memory is in flight; each turn reaches
exactly one successful call, in order, with ``previous_summary`` the summary installed at
call time.

Why it matters: restoring a session (a hydrate on a worker that already served it) while
its summary is being written runs two LLM calls on overlapping turns; whichever lands last
overwrites the other's summary with one built on a stale ``previous_summary``.
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
    running = 0
    peak = 0

    async def summarizer(payload: dict) -> dict:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await gate.wait()
        finally:
            running -= 1
        return {"summary": ", ".join(t["user"] for t in payload["turns"])}

    config = ShortTermMemoryConfig(
        strategy="rolling_summary", budget=MemoryBudget(full_zone_turns=1)
    )
    memory = DefaultShortTermMemory(config=config, summarizer=summarizer)
    for i in range(3):
        await memory.add_turn(ConversationTurn(f"u{i}", f"a{i}"))
    await asyncio.sleep(0.01)
    if running != 1:
        raise RuntimeError(f"setup: expected one call in flight, got {running}")
    memory.from_dict(memory.to_dict())  # e.g. a hydrate of the same session
    for i in range(3, 6):
        await memory.add_turn(ConversationTurn(f"u{i}", f"a{i}"))
        await asyncio.sleep(0.01)
    gate.set()
    await memory.flush()
    assert peak == 1, (
        f"WM-004: {peak} summarizer calls of one memory were in flight at once after "
        "from_dict during a call; at most one may be"
    )


if __name__ == "__main__":
    asyncio.run(main())
