"""Code the session tests run in other processes (importable by name under ``spawn``)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from stm_stores import SQLiteStateStore

from reference_impl import MemoryBudget, MemoryKey, ShortTermMemoryConfig
from reference_impl.session import MemoryRouter, PersistConflictError

#: The one key both writers of the lost-update test share.
SHARED_KEY = MemoryKey("shared-tenant", "shared-user", "shared-session")


class CoverageSummarizer:
    """Deterministic summarizer: the summary is the ids (user messages) of every covered turn.

    Appending to ``previous_summary`` makes the stored summary an exact record of which
    turns summaries covered, so a test can account for every turn.
    """

    async def __call__(self, payload: Any) -> dict[str, str]:
        ids = [turn["user"] for turn in payload["turns"]]
        return {"summary": " ".join(part for part in [payload["previous_summary"], *ids] if part)}


def coverage_config() -> ShortTermMemoryConfig:
    """Rolling summary with a small window, and budgets that never trim (full accounting)."""
    return ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=3, summary_max_tokens=4000, total_max_tokens=0),
    )


def lost_update_worker(db: str, name: str, turns: int, barrier: Any, out: str) -> None:
    """Run ``turns`` turns on :data:`SHARED_KEY` through a router of its own; write stats."""
    barrier.wait(timeout=60)  # both writers start together, to collide as much as possible
    result = asyncio.run(_lost_update(db, name, turns))
    Path(out).write_text(json.dumps(result), encoding="utf-8")


async def _lost_update(db: str, name: str, turns: int) -> dict[str, Any]:
    store = SQLiteStateStore(db)
    router = MemoryRouter(
        coverage_config(), store=store, summarizer=CoverageSummarizer(), conflict_retries=20
    )
    raised = 0
    started = time.time()
    try:
        for index in range(turns):
            async with router.turn(memory_key=SHARED_KEY) as turn:
                await asyncio.sleep(0.002)  # the agent thinks; the other writer gets a turn
                try:
                    await turn.finish(f"{name}-{index:03d}", "ok")
                except PersistConflictError:
                    raised += 1  # the turn stays unsaved and rides on the next save
        ended = time.time()
    finally:
        await router.aclose()
        await store.aclose()
    return {
        "name": name,
        "stats": asdict(router.stats),
        "conflict_errors": raised,
        "window": [started, ended],
    }


async def _print_memory(db: str, key: MemoryKey) -> None:
    store = SQLiteStateStore(db)
    router = MemoryRouter(coverage_config(), store=store, summarizer=CoverageSummarizer())
    try:
        async with router.turn(memory_key=key) as turn:
            memory = turn.llm_context.get("conversation_memory", {})
            turn.pause()  # only look: record nothing
    finally:
        await router.aclose()
        await store.aclose()
    print(json.dumps(memory))


def print_memory_main() -> None:
    """``python -c`` entry: print the ``conversation_memory`` a new router injects for a key."""
    db, tenant, user, session = sys.argv[1:5]
    asyncio.run(_print_memory(db, MemoryKey(tenant, user, session)))
