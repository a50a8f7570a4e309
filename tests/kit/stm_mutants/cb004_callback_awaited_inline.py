"""CB-004 broken: ``on_turn_added`` is awaited inside ``add_turn``.

The callback is not queued fire-and-forget but awaited before ``add_turn`` returns, so a
slow callback delays the conversation and a raising one raises out of ``add_turn``.
"""

from __future__ import annotations

from typing import Any

from reference_impl.callbacks import CallbackQueue
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "CB-004"
COLLATERAL: dict[str, str] = {}


class InlineCallbackMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_turn = CallbackQueue("on_turn_added", None)  # the queue is bypassed ...

    async def add_turn(self, turn: ConversationTurn) -> None:
        changes = self._changes
        try:
            await super().add_turn(turn)
        finally:
            # Stored (also when the estimator then raised): reported, as by the reference.
            callback = self._config.on_turn_added
            if callback is not None and self._changes != changes:
                await callback(turn)  # MUTATION: ... and the callback awaited inline


provider = mutant_provider("cb004-callback-awaited-inline", InlineCallbackMemory)
