"""SER-003 broken: from_dict does not check the turn numbers of a version 2 state.

Each turn record's ``seq`` is taken as written: two turns numbered alike, turns numbered
out of the order the state holds them, a ``next_seq`` at or below a turn's, or a turn at
or below ``summarized_through`` all load. The schema checks each number alone; their
order is the loader's to check, and a state that breaks it is malformed.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

from reference_impl import schema
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}

_loading = contextvars.ContextVar("ser003-turn-numbers-unchecked", default=False)
_check_order = schema._check_order


def _dispatch(*args: Any) -> None:
    if not _loading.get():  # every other memory keeps the reference's check
        _check_order(*args)
    # MUTATION: otherwise the order is not checked


schema._check_order = _dispatch


class UncheckedMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        token = _loading.set(True)
        try:
            super().from_dict(state)
        finally:
            _loading.reset(token)

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        token = _loading.set(True)
        try:
            await super().afrom_dict(state)
        finally:
            _loading.reset(token)


provider = mutant_provider("ser003-turn-numbers-unchecked", UncheckedMemory)
