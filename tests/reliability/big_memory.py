"""``python big_memory.py TURNS``: one memory takes TURNS turns (``rolling_summary``,
``RuleBasedSummarizer``, a 10k budget); prints the figures as JSON, peak RSS included (this
process's own, so measured alone). The loop's lag is measured by ``nox -s bench``."""

from __future__ import annotations

import asyncio
import json
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


def _memory_mib(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process. Not ``ru_maxrss``: Linux keeps
    that across ``exec``, so a child started by a large test process would report its
    parent's peak and hide its own growth."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


async def main(turns: int) -> dict[str, object]:
    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=5, summary_max_tokens=1_000, total_max_tokens=10_000),
    )
    before_tasks = asyncio.all_tasks()
    baseline = _memory_mib("VmRSS")
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
    kept = sum(len(state[part]) for part in ("turns", "pending", "backlog"))
    return {
        "turns": turns,
        "seconds": round(took, 2),
        "kept": kept,
        "summarized_through": state["summarized_through"],
        "dropped": state["dropped_turns"],
        "healthy": memory.health is MemoryHealth.HEALTHY,
        "tasks_left": len(asyncio.all_tasks() - before_tasks),
        "rss_baseline_mib": round(baseline, 1),
        "rss_peak_mib": round(_memory_mib("VmHWM"), 1),
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(int(sys.argv[1])))))
