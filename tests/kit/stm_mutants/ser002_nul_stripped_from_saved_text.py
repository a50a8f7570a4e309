"""SER-002 broken: NUL characters are stripped from turn text when the state is written.

PostgreSQL's ``jsonb`` and ``text`` refuse ``\\u0000``, so the writer drops NUL characters
from each turn's user message and answer in ``to_dict()`` (and so in ``persist``). A turn
whose text holds one shows it in the view, but a memory restored from the state shows the
text without it, and counts fewer tokens. Text without NUL is written as in the reference.
"""

from __future__ import annotations

from typing import Any

from reference_impl import schema
from reference_impl.entries import Entry
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import _on, _switch

BREAKS = "SER-002"
COLLATERAL: dict[str, str] = {}

_original = schema.dump_turn


def _dump_turn(entry: Entry) -> dict[str, Any]:
    dumped = _original(entry)
    for field in ("user_message", "assistant_response"):
        # MUTATION: the writer drops what its database cannot store.
        dumped[field] = dumped[field].replace("\x00", "")
    return dumped


_active = _switch(schema, "dump_turn", _dump_turn)


class NulStrippingMemory(DefaultShortTermMemory):
    def to_dict(self) -> dict[str, Any]:
        with _on(_active):
            return super().to_dict()

    def _persisting(self, store: Any, key: str) -> Any:
        with _on(_active):
            return super()._persisting(store, key)


provider = mutant_provider("ser002-nul-stripped-from-saved-text", NulStrippingMemory)
