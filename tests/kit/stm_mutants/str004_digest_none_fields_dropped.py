"""STR-004 broken (control): the rendered digest leaves out fields that are None
(``model_dump(exclude_none=True)``), so a digest without reasoning renders without
"reasoning_summary"."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

from reference_impl import entries
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider
from ._util import swapped

BREAKS = "STR-004"
COLLATERAL: dict[str, str] = {}

_render = entries.render_turn


def _render_turn(turn: ConversationTurn, *, include_digest: bool) -> dict[str, Any]:
    rendered = _render(turn, include_digest=include_digest)
    digest = rendered.get("trajectory_digest")
    if digest is not None:
        rendered["trajectory_digest"] = {k: v for k, v in digest.items() if v is not None}
    return rendered  # MUTATION: None fields dropped


def _fresh(rendered: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(rendered)


@contextlib.contextmanager
def _patched() -> Iterator[None]:
    with swapped(entries, "render_turn", _render_turn), swapped(entries, "_fresh", _fresh):
        yield


class ExcludeNoneMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        with _patched():
            await super().add_turn(turn)

    def from_dict(self, state: Any) -> None:
        with _patched():
            super().from_dict(state)

    async def afrom_dict(self, state: Any) -> None:
        with _patched():
            await super().afrom_dict(state)


provider = mutant_provider("str004-digest-none-fields-dropped", ExcludeNoneMemory)
