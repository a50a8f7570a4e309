"""HLT-002: after a failed summarizer call no retry runs until the next add_turn().

What happens: PenguiFlow 3.11.2 moves to RETRY and, inside the summarization task, sleeps
``retry_backoff_base_s * 2**(n-1)``. It then schedules the retry only if no summarization
task is running, but the task running is the very one doing the scheduling, so the retry
is never started. The memory stays in RETRY until the application calls ``add_turn()``.

Spec (HLT-002): a failed call MUST move HEALTHY to RETRY; the memory itself MUST schedule
retry *n* after ``retry_backoff_base_s * 2**(n-1)`` seconds, without waiting for another
``add_turn``.

Why it matters: after one transient LLM error a quiet conversation is never summarized:
its pending turns wait, growing the prompt, until the user speaks again.
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

    async def flaky_summarizer(payload: dict) -> dict:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("transient LLM error")
        return {"summary": "summary of " + ", ".join(t["user"] for t in payload["turns"])}

    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=1),
        retry_attempts=3,
        retry_backoff_base_s=0.01,
    )
    memory = DefaultShortTermMemory(config=config, summarizer=flaky_summarizer)
    await memory.add_turn(ConversationTurn("u0", "a0"))
    await memory.add_turn(ConversationTurn("u1", "a1"))  # evicts u0: the first call fails

    await asyncio.sleep(0.5)  # 50 times the first backoff; no further add_turn
    if calls == 0:
        raise RuntimeError("setup: the summarizer was never called")
    assert calls >= 2 and memory.health.value == "healthy", (
        f"HLT-002: {calls} summarizer call(s) in 0.5s with a 0.01s backoff; the retry was "
        f"never started and the memory is still {memory.health.value!r}"
    )


if __name__ == "__main__":
    asyncio.run(main())
