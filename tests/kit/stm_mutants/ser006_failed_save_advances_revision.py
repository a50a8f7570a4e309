"""SER-006 broken: ``persist`` advances the revision when it takes the state, before the
store writes it; a save that fails leaves it advanced, so the next persist skips a
revision (two above the state it was hydrated from) and a conditional save expects a
revision that was never written.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-006"
COLLATERAL: dict[str, str] = {}


class Memory(DefaultShortTermMemory):
    def _persisting(self, store, key):
        save = super()._persisting(store, key)
        if save is not None:
            self._state.revision += 1  # MUTATION: advanced before the write lands
        return save


provider = mutant_provider("ser006-failed-save-advances-revision", Memory)
