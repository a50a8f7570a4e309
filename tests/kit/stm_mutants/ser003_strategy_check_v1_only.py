"""SER-003 broken: the check that a none/truncation state holds nothing such a memory ever
holds (health other than healthy, a summary, pending or backlog turns) runs only on the
PenguiFlow v1 migration path; a version-2 truncation state recorded DEGRADED, with a
summary or with pending turns, loads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl import schema
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import swapped

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}


class V1OnlyCheckMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        if isinstance(state, Mapping) and state.get("version") == 2:
            with swapped(schema, "_check_strategy", lambda model, entries: None):  # MUTATION
                super().from_dict(state)
            return
        super().from_dict(state)


provider = mutant_provider("ser003-strategy-check-v1-only", V1OnlyCheckMemory)
