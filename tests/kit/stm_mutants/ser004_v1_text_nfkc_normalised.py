"""SER-004 broken: text of a PenguiFlow version-1 state is NFKC-normalised on load.

Legacy records are "cleaned" while they are upgraded: every string of a version-1 state
(turns, digests, summary) goes through ``unicodedata.normalize("NFKC", ...)``. ASCII text
loads unchanged, but compatibility characters do not: a no-break space becomes a space,
``x²`` becomes ``x2`` and ``18℃`` becomes ``18°C``. A loaded state must show the turns
that were stored. Version-2 states load as in the reference.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-004"
COLLATERAL: dict[str, str] = {}


def _normalised(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFKC", value)  # MUTATION: legacy text rewritten
    if isinstance(value, Mapping):
        return {k: _normalised(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalised(v) for v in value]
    return value


class NormalisingUpgradeMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        if isinstance(state, Mapping) and state.get("version") == 1:
            parts = ("summary", "turns", "pending", "backlog")
            state = {k: _normalised(v) if k in parts else v for k, v in state.items()}
        super().from_dict(state)


provider = mutant_provider("ser004-v1-text-nfkc-normalised", NormalisingUpgradeMemory)
