"""SER-006: persisted states carry no revision.

What happens: PenguiFlow 3.11.2's ``persist(store, key)`` saves ``to_dict()``, which has no
``revision`` (nor any other version counter of the conversation), so a store cannot tell a
newer write from a stale one.

Spec (SER-006): each persisted state MUST carry a ``revision`` one higher than the state it
was hydrated from, so a store that supports conditional save can refuse a stale write.

Why it matters: two workers that hydrate the same session and persist after their turns
silently overwrite each other: the last writer wins and the other turn is lost.
"""

import asyncio
import json

from penguiflow.planner.memory import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    ShortTermMemoryConfig,
)


class DictStore:
    """A store with the documented ``save_memory_state``/``load_memory_state`` contract."""

    def __init__(self) -> None:
        self.records: dict[str, dict] = {}

    async def save_memory_state(self, key: str, state: dict) -> None:
        self.records[key] = json.loads(json.dumps(state))

    async def load_memory_state(self, key: str) -> dict | None:
        return self.records.get(key)


def make() -> DefaultShortTermMemory:
    config = ShortTermMemoryConfig(strategy="truncation", budget=MemoryBudget(full_zone_turns=5))
    return DefaultShortTermMemory(config=config)


async def main() -> None:
    store, key = DictStore(), "acme:alice:s1"
    first = make()
    await first.add_turn(ConversationTurn("u0", "a0"))
    await first.persist(store, key)
    saved = store.records[key].get("revision")

    second = make()  # another worker picks the session up
    await second.hydrate(store, key)
    await second.add_turn(ConversationTurn("u1", "a1"))
    await second.persist(store, key)
    resaved = store.records[key].get("revision")

    assert isinstance(saved, int) and resaved == saved + 1, (
        f"SER-006: persisted revisions are {saved!r} then {resaved!r}, not n then n + 1; "
        f"the stored state has only {sorted(store.records[key])}"
    )


if __name__ == "__main__":
    asyncio.run(main())
