"""SER-006 broken: a loaded state's revision is dropped; the next persist starts again at 1.

The backend treats ``revision`` as metadata of the stored record, not of the state, and
``from_dict`` (hence ``hydrate``) does not keep it. A memory that persists repeatedly
numbers its own writes correctly, but one hydrated from revision *n* writes revision 1
instead of *n + 1*, so a store with conditional saves cannot tell a stale writer from a
fresh one.
"""

from __future__ import annotations

from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-006"
COLLATERAL: dict[str, str] = {}


class RevisionlessLoadMemory(DefaultShortTermMemory):
    def _install(self, loaded: MemoryState) -> None:  # every load: from_dict, hydrate
        loaded.revision = 0  # MUTATION: the loaded revision is not kept
        super()._install(loaded)


provider = mutant_provider("ser006-revision-reset-on-load", RevisionlessLoadMemory)
