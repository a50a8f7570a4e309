"""A process that records turns through a router into SQLite until it is killed.

``python killed_writer.py DB FIRST``: turns ``t<FIRST>``, ``t<FIRST+1>``, ... on one key,
each printed (``t<N>``) once ``finish()`` has returned, i.e. once it is saved.
"""

from __future__ import annotations

import asyncio
import sys

from stm_stores import SQLiteStateStore

from reference_impl import MemoryBudget, MemoryKey, ShortTermMemoryConfig
from reference_impl.session import MemoryRouter

KEY = MemoryKey("tenant", "user", "killed-session")


class CoverageSummarizer:
    """The summary lists every turn it covers, so a test can account for each turn."""

    async def __call__(self, payload: dict[str, object]) -> dict[str, str]:
        ids = [turn["user"] for turn in payload["turns"]]  # type: ignore[attr-defined]
        previous = payload["previous_summary"]
        return {"summary": " ".join(part for part in [previous, *ids] if part)}


def config() -> ShortTermMemoryConfig:
    return ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=3, summary_max_tokens=200_000, total_max_tokens=0),
    )


async def main(db: str, first: int) -> None:
    store = SQLiteStateStore(db)
    router = MemoryRouter(config(), store=store, summarizer=CoverageSummarizer())
    index = first
    while True:
        async with router.turn(memory_key=KEY) as turn:
            await turn.finish(f"t{index}", f"answer {index}")
        print(f"t{index}", flush=True)
        index += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
