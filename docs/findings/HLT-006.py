"""HLT-006: a DEGRADED memory never attempts recovery on its own.

What happens: PenguiFlow 3.11.2 starts a recovery attempt (RECOVERING) only from
``add_turn()``. A DEGRADED memory whose summarizer is working again stays DEGRADED, with
no summary in its view, for as long as the application adds no turn, however long past
``degraded_retry_interval_s`` that is.

Spec (HLT-006): while DEGRADED with a non-empty backlog, the memory itself MUST attempt
recovery (RECOVERING) at most once per ``degraded_retry_interval_s``; success installs a
summary that covers the backlog turns sent and returns to HEALTHY.

Why it matters: a conversation that paused during an outage resumes with a degraded
memory (recent turns only, backlog unsummarized) although the summarizer came back long
ago, and a memory persisted meanwhile is stored DEGRADED.
"""

import asyncio

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
)


async def main() -> None:
    calls = 0

    async def summarizer(payload: dict) -> dict:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("LLM provider is down")  # only the first call fails
        return {"summary": "summary of " + ", ".join(t["user"] for t in payload["turns"])}

    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=1),
        retry_attempts=0,  # the first failure degrades
        degraded_retry_interval_s=0.05,
    )
    memory = DefaultShortTermMemory(config=config, summarizer=summarizer)
    await memory.add_turn(ConversationTurn("u0", "a0"))
    await memory.add_turn(ConversationTurn("u1", "a1"))  # evicts u0: the call fails
    await memory.flush()
    if memory.health.value != "degraded":
        raise RuntimeError(f"setup: expected DEGRADED, got {memory.health.value!r}")

    await asyncio.sleep(0.5)  # ten recovery intervals; no further add_turn
    assert memory.health.value == "healthy", (
        f"HLT-006: still {memory.health.value!r} 0.5s after degrading with "
        f"degraded_retry_interval_s=0.05; {calls - 1} recovery attempt(s) were made"
    )


if __name__ == "__main__":
    asyncio.run(main())
