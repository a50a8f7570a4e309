"""HLT-005: turns dropped from the DEGRADED backlog are not counted anywhere.

What happens: while DEGRADED, PenguiFlow 3.11.2 keeps evicted turns in a backlog of at most
``recovery_backlog_limit`` turns and drops the oldest beyond it, which is allowed. But it
does not count them: ``to_dict()`` has no ``dropped_turns`` (and no other trace), so
neither the application nor a restored memory can tell that turns were lost.

Spec (HLT-005): in DEGRADED, evicted turns MUST go to a backlog holding at most
``recovery_backlog_limit`` turns, dropping the oldest first; each drop MUST be counted
(``dropped_turns`` in ``to_dict()``).

Why it matters: during a summarizer outage parts of the conversation are forgotten for
good; without a count nobody can alert on it or tell the user.
"""

import asyncio

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
)


async def main() -> None:
    async def broken_summarizer(payload: dict) -> dict:
        raise ConnectionError("LLM provider is down")

    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=1),
        retry_attempts=0,  # the first failure degrades
        recovery_backlog_limit=2,
    )
    # A frozen clock keeps recovery attempts from starting, so the numbers are exact.
    memory = DefaultShortTermMemory(
        config=config, summarizer=broken_summarizer, time_source=lambda: 0.0
    )
    await memory.add_turn(ConversationTurn("u0", "a0"))
    await memory.add_turn(ConversationTurn("u1", "a1"))  # evicts u0: the call fails
    await memory.flush()
    if memory.health.value != "degraded":
        raise RuntimeError(f"setup: expected DEGRADED, got {memory.health.value!r}")
    for i in range(2, 6):
        await memory.add_turn(ConversationTurn(f"u{i}", f"a{i}"))  # evicts u1..u4

    state = memory.to_dict()
    backlog = [t["user_message"] for t in state["backlog"]]  # u0..u4 evicted, 2 kept
    assert state.get("dropped_turns") == 3, (
        f"HLT-005: u0..u4 went to the DEGRADED backlog, which keeps {backlog}, so 3 were "
        f"dropped; to_dict() records dropped_turns={state.get('dropped_turns')!r} "
        f"(keys: {sorted(state)})"
    )


if __name__ == "__main__":
    asyncio.run(main())
