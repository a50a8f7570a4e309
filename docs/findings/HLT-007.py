"""HLT-007: an oversize summary does not count as a summarizer failure.

What happens: PenguiFlow 3.11.2 counts a summarizer call as failed when it raises or
returns no string ``summary`` (the memory moves to RETRY), but not when the summary is
over ``summary_max_tokens``: it cuts the text to size, installs the cut and stays HEALTHY.

Spec (HLT-007): invalid summarizer output (not a mapping, no string ``summary``, over
budget (BUD-007), a timeout (WM-008) or an exception) MUST count as a failure.

Why it matters: the health state is how an application notices a misbehaving summarizer
(prompt drift, a model that ignores length limits). Oversize output is invisible to it and
never retried; the memory keeps an arbitrary tail of the text as its summary.
"""

import asyncio

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
)

OUTPUTS = {
    "non-string summary": {"summary": 42},
    "oversize summary": {"summary": "The user is Ada and lives in Paris. " * 10},  # ~90 tokens
}


async def health_after(output: dict) -> str:
    async def summarizer(payload: dict) -> dict:
        return output

    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=1, summary_max_tokens=20),
        retry_backoff_base_s=30.0,  # no retry during the check
    )
    memory = DefaultShortTermMemory(config=config, summarizer=summarizer)
    await memory.add_turn(ConversationTurn("u0", "a0"))
    await memory.add_turn(ConversationTurn("u1", "a1"))  # evicts u0: one summarizer call
    await asyncio.sleep(0.05)
    return memory.health.value


async def main() -> None:
    health = {name: await health_after(output) for name, output in OUTPUTS.items()}
    if health["non-string summary"] != "retry":
        raise RuntimeError(f"setup: a non-string summary should count as a failure: {health}")
    assert health["oversize summary"] == "retry", (
        f"HLT-007: after an oversize summary the memory is {health['oversize summary']!r}, "
        f"not 'retry' as after a non-string one; the output was cut and installed ({health})"
    )


if __name__ == "__main__":
    asyncio.run(main())
