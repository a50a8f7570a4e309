"""KEY-007: a state saved for one key is hydrated into another key's memory.

What happens: PenguiFlow 3.11.2's ``to_dict()`` (and so ``persist(store, key)``) records
nothing about the key the state belongs to, and ``hydrate(store, key)`` / ``from_dict()``
load whatever record they are given. A record that ends up under the wrong storage key
(a store bug, a botched migration, a copy-paste in an admin script) is grafted into the
other user's memory without a warning.

Spec (KEY-007): a state MUST record the key it belongs to; loading it into a memory or
store key it does not belong to MUST be refused (``from_dict``: ``ValueError``;
``hydrate``: a logged warning and no change).

Why it matters: one user's conversation (personal data included) ends up in another
user's prompt, the worst failure a multi-tenant memory can have.
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
    config = ShortTermMemoryConfig(strategy="truncation", budget=MemoryBudget(full_zone_turns=3))
    return DefaultShortTermMemory(config=config)


async def main() -> None:
    store = DictStore()
    alice = make()
    await alice.add_turn(ConversationTurn("My card number is 4111 1111 1111 1111", "Noted."))
    await alice.persist(store, "acme:alice:s1")
    # A mis-routed record: Alice's state stored under Bob's key.
    store.records["acme:bob:s1"] = store.records["acme:alice:s1"]

    bob = make()
    await bob.hydrate(store, "acme:bob:s1")
    view = await bob.get_llm_context()
    assert "4111" not in json.dumps(view), (
        f"KEY-007: Bob's memory hydrated Alice's state: {view}; the stored state records no "
        f"key (fields: {sorted(store.records['acme:alice:s1'])})"
    )


if __name__ == "__main__":
    asyncio.run(main())
