"""A process killed (SIGKILL) at random points while it saves turns to SQLite: every turn
it reported saved is in the file, the file always loads, and the next process goes on
from it."""

from __future__ import annotations

import asyncio
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from killed_writer import KEY
from stm_stores import SQLiteStateStore

#: Processes killed, one after the other, on one database file.
KILLS = 8
WRITER = Path(__file__).parent / "killed_writer.py"


def _accounted(state: dict[str, Any]) -> list[str]:
    """Every turn the stored state holds: summarized (listed in the summary), then kept."""
    summarized = state["summary"].split()
    kept = [t["user_message"] for part in ("pending", "turns") for t in state[part]]
    return summarized + sorted(kept, key=lambda u: int(u[1:]))


def _read(stream: Any, lines: queue.Queue[str]) -> None:
    """Forward the writer's lines (a reader thread, so a silent writer cannot hang the test)."""
    for line in stream:
        lines.put(line.strip())


def _load(db: Path) -> dict[str, Any] | None:
    async def load() -> dict[str, Any] | None:
        async with SQLiteStateStore(db) as store:
            return await store.load_memory_state(KEY.composite())

    return asyncio.run(load())


def test_turns_reported_saved_survive_sigkill_at_random_points(tmp_path: Path) -> None:
    db = tmp_path / "killed.db"
    rng = random.Random(20261125)
    saved = 0  # turns in the file after the last kill
    reported_total = 0
    for _ in range(KILLS):
        writer = subprocess.Popen(
            [sys.executable, str(WRITER), str(db), str(saved)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(target=_read, args=(writer.stdout, lines), daemon=True)
        reader.start()
        wanted = rng.randint(5, 60)
        try:
            reported = [lines.get(timeout=30) for _ in range(wanted)]
        finally:
            time.sleep(rng.uniform(0, 0.01))  # somewhere inside a later save, or between
            writer.send_signal(signal.SIGKILL)
            writer.wait(timeout=30)
            reader.join(timeout=30)
        while not lines.empty():
            reported.append(lines.get())  # printed before it died
        reported = [line for line in reported if line]
        assert writer.returncode == -signal.SIGKILL
        state = _load(db)
        assert state is not None
        turns = _accounted(state)
        # In order, each once, from the first turn on: nothing lost, nothing twice.
        assert turns == [f"t{i}" for i in range(len(turns))], turns[-10:]
        assert reported == [f"t{i}" for i in range(saved, saved + len(reported))]
        # Every turn reported saved is there; at most one more (saved, not yet printed).
        assert saved + len(reported) <= len(turns) <= saved + len(reported) + 1
        reported_total += len(reported)
        saved = len(turns)
    print(f"\n{KILLS} writers killed: {saved} turns in the file, {reported_total} reported saved")
