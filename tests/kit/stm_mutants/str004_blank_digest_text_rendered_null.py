"""STR-004 broken: blank digest texts render as ``null``.

The renderer "normalises" a trajectory digest: an ``observations_summary`` or
``reasoning_summary`` that is empty or whitespace-only is rendered as ``None`` ("nothing
observed"). A digest with real text renders as given; the stored turn (``to_dict()``)
keeps the empty strings. The rendered digest is no longer the turn's digest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl import entries
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider
from ._util import _on, _switch

BREAKS = "STR-004"
COLLATERAL: dict[str, str] = {}

_original = entries.render_turn


def _render(turn: ConversationTurn, *, include_digest: bool) -> dict[str, Any]:
    rendered = _original(turn, include_digest=include_digest)
    digest = rendered.get("trajectory_digest")
    if digest is not None:
        for name in ("observations_summary", "reasoning_summary"):
            text = digest[name]
            if isinstance(text, str) and not text.strip():
                digest[name] = None  # MUTATION: blank text rendered as null
    return rendered


_active = _switch(entries, "render_turn", _render)


class BlankDigestNullMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        with _on(_active):
            await super().add_turn(turn)

    def from_dict(self, state: Mapping[str, Any]) -> None:
        with _on(_active):
            super().from_dict(state)

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        with _on(_active):
            await super().afrom_dict(state)


provider = mutant_provider("str004-blank-digest-text-rendered-null", BlankDigestNullMemory)
