"""``python big_memory.py TURNS``: one memory takes TURNS turns (``rolling_summary``,
``RuleBasedSummarizer``, a 10k budget) while a probe measures the event loop's lag; prints
the figures as JSON, peak RSS included (this process's own, so measured alone)."""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time

from reference_impl import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    MemoryHealth,
    ShortTermMemoryConfig,
)
from reference_impl.summarizers import RuleBasedSummarizer


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main(turns: int) -> dict[str, object]:
    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=5, summary_max_tokens=1_000, total_max_tokens=10_000),
    )
    before_tasks = asyncio.all_tasks()
    worst = 0.0
    loop = asyncio.get_running_loop()

    async def probe() -> None:
        nonlocal worst
        while True:
            started = loop.time()
            await asyncio.sleep(0.001)
            worst = max(worst, loop.time() - started - 0.001)

    probing = loop.create_task(probe())
    baseline = _rss_mib()
    memory = DefaultShortTermMemory(config=config, summarizer=RuleBasedSummarizer())
    started = time.perf_counter()
    for index in range(turns):
        await memory.add_turn(
            ConversationTurn(f"question {index}: what about λ and 🐧?", f"answer {index}")
        )
        if index % 10 == 0:
            await asyncio.sleep(0)
    await memory.flush()
    took = time.perf_counter() - started
    state = memory.to_dict()
    await memory.aclose()
    probing.cancel()
    await asyncio.gather(probing, return_exceptions=True)
    kept = sum(len(state[part]) for part in ("turns", "pending", "backlog"))
    return {
        "turns": turns,
        "seconds": round(took, 2),
        "kept": kept,
        "summarized_through": state["summarized_through"],
        "dropped": state["dropped_turns"],
        "healthy": memory.health is MemoryHealth.HEALTHY,
        "tasks_left": len(asyncio.all_tasks() - before_tasks),
        "max_loop_lag_ms": round(worst * 1000, 2),
        "rss_baseline_mib": round(baseline, 1),
        "rss_peak_mib": round(_rss_mib(), 1),
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(int(sys.argv[1])))))
