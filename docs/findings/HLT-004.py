"""HLT-004: a memory whose summarizer keeps failing never reaches DEGRADED on its own.

What happens: PenguiFlow 3.11.2 never starts a retry by itself (see HLT-002), so after the
first failed call it stays in RETRY. The ``retry_attempts`` retries that should lead to
DEGRADED only happen when the application calls ``add_turn()`` again, one per call.

Spec (HLT-004): after the first attempt and ``retry_attempts`` retries have failed, the
memory MUST become DEGRADED: the view shows recent turns only and pending turns move to
the backlog.

Why it matters: with the summarizer down, a quiet conversation stays in RETRY for good:
its pending turns keep growing the prompt, and monitoring never sees the outage as
DEGRADED (no ``on_health_changed(retry, degraded)``).
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

    async def broken_summarizer(payload: dict) -> dict:
        nonlocal calls
        calls += 1
        raise ConnectionError("LLM provider is down")

    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=1),
        retry_attempts=2,
        retry_backoff_base_s=0.01,  # retries due after 0.01s and 0.02s more
    )
    memory = DefaultShortTermMemory(config=config, summarizer=broken_summarizer)
    await memory.add_turn(ConversationTurn("u0", "a0"))
    await memory.add_turn(ConversationTurn("u1", "a1"))  # evicts u0: the first call fails

    await asyncio.sleep(0.5)  # no further add_turn
    if calls == 0:
        raise RuntimeError("setup: the summarizer was never called")
    assert memory.health.value == "degraded", (
        f"HLT-004: after 0.5s the memory is {memory.health.value!r} with {calls} failed "
        "call(s); the first attempt and 2 retries should have failed and left it DEGRADED"
    )


if __name__ == "__main__":
    asyncio.run(main())
