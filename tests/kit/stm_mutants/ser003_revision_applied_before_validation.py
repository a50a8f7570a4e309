"""SER-003 broken: a refused ``from_dict`` has already taken the input's ``revision``.

The stored revision is applied before the input is validated; a malformed state raises
``ValueError`` but leaves ``to_dict()["revision"]`` changed (and with it what the next
``persist()`` writes, see SER-006).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}


class RevisionFirstMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        revision = state.get("revision") if isinstance(state, Mapping) else None
        if isinstance(revision, int) and not isinstance(revision, bool):
            self._state.revision = revision  # MUTATION: applied before validation
        super().from_dict(state)


provider = mutant_provider("ser003-revision-applied-before-validation", RevisionFirstMemory)
