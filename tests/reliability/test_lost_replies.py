"""Routers on one SQLite file whose saves fail before writing, or write and then raise (a
lost reply), while the other routers summarize and move the same keys' turns on. Each
caller retries its ``finish`` with the turn's id until it returns: every turn must end up
stored exactly once, verbatim or in a summary (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from stm_stores import SQLiteStateStore

from reference_impl import MemoryKey
from reference_impl.session import MemoryRouter, PersistConflictError
from reference_impl.store import StateStoreError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "session"))
from session_workers import CoverageSummarizer, coverage_config

pytestmark = pytest.mark.anyio

#: Seeds of the runs; each runs ROUTERS routers x TURNS turns over KEYS keys.
LOST_REPLY_SEEDS = (1, 2, 3, 4)
ROUTERS, KEYS, TURNS = 3, 3, 40
#: The share of conditional saves that fail before writing, and that write then raise.
FAIL_BEFORE, FAIL_AFTER = 0.1, 0.1


class _Flaky:
    """A store whose conditional saves fail now and then, before or after the write."""

    def __init__(self, inner: SQLiteStateStore, rng: random.Random, faults: Counter[str]) -> None:
        self.inner, self.rng, self.faults = inner, rng, faults

    async def load_memory_state(self, key: str) -> dict[str, Any] | None:
        return await self.inner.load_memory_state(key)

    async def save_memory_state(self, key: str, state: Mapping[str, Any]) -> None:
        await self.inner.save_memory_state(key, state)

    async def save_memory_state_if(
        self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
    ) -> None:
        draw = self.rng.random()
        if draw < FAIL_BEFORE:
            self.faults["before"] += 1
            raise StateStoreError("injected: failed before writing", key=key)
        await self.inner.save_memory_state_if(key, state, expected_revision=expected_revision)
        if draw > 1 - FAIL_AFTER:
            self.faults["after"] += 1
            raise StateStoreError("injected: the reply was lost after the write", key=key)


async def _writer(
    router: MemoryRouter, name: str, keys: list[MemoryKey], rng: random.Random
) -> None:
    for index in range(TURNS):
        key, turn_id = rng.choice(keys), f"{name}-{index:03d}"
        for _ in range(100):  # until finish returns: the caller's retry, with the same id
            async with router.turn(memory_key=key) as turn:
                await asyncio.sleep(rng.random() * 0.002)
                try:
                    await turn.finish(turn_id, "ok", turn_id=turn_id)
                    break
                except (PersistConflictError, StateStoreError):
                    continue
        else:
            raise AssertionError(f"{turn_id} was never saved")


@pytest.mark.parametrize("seed", LOST_REPLY_SEEDS)
async def test_every_turn_is_stored_once_through_lost_replies(
    seed: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL)  # the injected failures are logged as they happen
    rng, faults = random.Random(seed), Counter[str]()
    db = tmp_path / "lost.db"
    keys = [MemoryKey("t", "u", f"s{k}") for k in range(KEYS)]
    stores = [SQLiteStateStore(db, cached_keys=rng.choice([0, 1, 1024])) for _ in range(ROUTERS)]
    routers = [
        MemoryRouter(
            coverage_config(),
            store=_Flaky(store, rng, faults),
            summarizer=CoverageSummarizer(),
            max_memories=rng.choice([1, 2, 8]),
            conflict_retries=30,
            summary_save_delay_s=rng.choice([0, 0.001, 0.01]),
        )
        for store in stores
    ]
    await asyncio.gather(*(_writer(r, f"r{n}", keys, rng) for n, r in enumerate(routers)))
    for router in routers:
        for _ in range(100):  # a close's last save may meet an injected failure too
            try:
                await router.aclose()
                break
            except StateStoreError:
                continue
    for store in stores:
        await store.aclose()

    seen: Counter[str] = Counter()
    async with SQLiteStateStore(db) as reader:
        for key in keys:
            state = await reader.load_memory_state(key.composite())
            assert state is not None
            for part in ("turns", "pending", "backlog"):
                seen.update(t["user_message"] for t in state[part])
            seen.update(state["summary"].split())
    expected = {f"r{n}-{i:03d}" for n in range(ROUTERS) for i in range(TURNS)}
    assert set(seen) == expected, f"missing {sorted(expected - set(seen))[:5]}"
    assert [t for t, n in seen.items() if n > 1] == [], "turns stored twice"
    assert faults["before"] > 0 and faults["after"] > 0
    assert sum(r.stats.already_saved_turns + r.stats.repeated_turns for r in routers) > 0
