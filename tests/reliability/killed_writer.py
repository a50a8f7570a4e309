"""A process that records turns through a router into SQLite until it is killed.

``python killed_writer.py DB FIRST``: turns ``t<FIRST>``, ``t<FIRST+1>``, ... on one key,
each printed (``t<N>``) once ``finish()`` has returned, i.e. once it is saved.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from stm_stores import SQLiteStateStore

from reference_impl import MemoryKey
from reference_impl.session import MemoryRouter

# The session tests' summarizer (its summary names every turn it covers) and configuration.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "session"))
from session_workers import CoverageSummarizer, coverage_config

KEY = MemoryKey("tenant", "user", "killed-session")


async def main(db: str, first: int) -> None:
    store = SQLiteStateStore(db)
    router = MemoryRouter(coverage_config(), store=store, summarizer=CoverageSummarizer())
    index = first
    while True:
        async with router.turn(memory_key=KEY) as turn:
            await turn.finish(f"t{index}", f"answer {index}")
        print(f"t{index}", flush=True)
        index += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
