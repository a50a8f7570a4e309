"""SER-003 broken: a ``truncation`` or ``none`` memory loads a state that records what it
never holds.

``from_dict`` takes a DEGRADED (or RETRY, RECOVERING) health, a summary, or pending and
backlog turns into a memory without a summarizer. Its health then reports DEGRADED for
good, with nothing to recover it, and the turns no view shows go from save to save. The
reference refuses such a state as malformed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from reference_impl import schema
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}


@contextlib.contextmanager
def _unchecked() -> Iterator[None]:
    checked = schema._check_strategy
    schema._check_strategy = lambda model, entries: None  # MUTATION: anything loads
    try:
        yield
    finally:
        schema._check_strategy = checked


class LoadsAnythingMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        with _unchecked():
            super().from_dict(state)

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        with _unchecked():
            await super().afrom_dict(state)


provider = mutant_provider("ser003-no-summarizer-state-loads-any-health", LoadsAnythingMemory)
