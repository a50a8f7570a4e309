"""BUD-003 broken: a version-2 state of a truncation memory is loaded with all its recent
turns, whatever this memory's full_zone_turns ("truncation has nothing to evict to").
rolling_summary states and v1 states are brought within the window as by the reference."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl import schema
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-003"
COLLATERAL: dict[str, str] = {}


class WideLoadMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        cfg = self._config
        if (
            cfg.strategy == "truncation"
            and isinstance(state, Mapping)
            and state.get("version") == 2
            and isinstance(state.get("turns"), list)
        ):
            loaded = schema.load(state, cfg, self._budget, self._state.key)  # validates
            # MUTATION: reload the stored recent turns without the window
            from reference_impl.entries import Entry

            entries = []
            for index, raw in enumerate(state["turns"]):
                seq, turn = schema._read_turn(raw, f"state.turns[{index}]")
                entries.append(
                    Entry.make(
                        seq,
                        turn,
                        include_digest=cfg.include_trajectory_digest,
                        size_of=self._budget.meter.size_of,
                    )
                )
            loaded.recent.clear()
            loaded.recent_size = 0
            for e in entries:
                loaded.push_recent(e)
            self._budget.enforce(loaded)  # the token budget still applies
            self._install(loaded)
            return
        super().from_dict(state)


provider = mutant_provider("bud003-v2-truncation-load-keeps-window", WideLoadMemory)
