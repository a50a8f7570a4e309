"""WM-008: flush() waits forever for a hung summarizer call.

What happens: PenguiFlow 3.11.2 has no summarizer timeout (``ShortTermMemoryConfig`` has
no such field) and ``flush()`` awaits the in-flight summarization task. A summarizer call
that never returns keeps ``flush()`` from ever returning, and the memory stays HEALTHY.

Spec (WM-008): ``flush()`` MUST NOT hang on a hung summarizer: a call running longer than
``summarizer_timeout_s`` fails (and, by HLT-007, counts as a summarizer failure).

Why it matters: callers flush before persisting and at shutdown; one stuck LLM request
(a dropped connection, a provider outage) stalls the request handler or the shutdown.
"""

import asyncio

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
)

PATIENCE_S = 1.5  # thirty times the 0.05s timeout the spec's option would set


async def main() -> None:
    async def hung_summarizer(payload: dict) -> dict:
        await asyncio.Event().wait()  # never returns
        return {"summary": "unreachable"}

    options = {"strategy": "rolling_summary", "budget": MemoryBudget(full_zone_turns=1)}
    # retry_attempts=0: the first failed call degrades, after which flush() returns.
    try:  # summarizer_timeout_s is the spec's option; PenguiFlow 3.11.2 has no such field
        config = ShortTermMemoryConfig(**options, retry_attempts=0, summarizer_timeout_s=0.05)
    except TypeError:
        config = ShortTermMemoryConfig(**options, retry_attempts=0)
    memory = DefaultShortTermMemory(config=config, summarizer=hung_summarizer)
    await memory.add_turn(ConversationTurn("u0", "a0"))
    await memory.add_turn(ConversationTurn("u1", "a1"))  # evicts u0: the hung call starts

    try:
        await asyncio.wait_for(memory.flush(), timeout=PATIENCE_S)
        returned = True
    except TimeoutError:
        returned = False
    assert returned, (
        f"WM-008: flush() had not returned after {PATIENCE_S}s on a hung summarizer "
        f"(health still {memory.health.value!r}); no summarizer timeout applies"
    )


if __name__ == "__main__":
    asyncio.run(main())
