"""SER-002 broken: from_dict normalises an empty trajectory digest (no tools, no
observations, no reasoning, no artifact refs) to no digest, as PenguiFlow's digest builder
would. A turn added with such a digest renders with "trajectory_digest" before the round
trip and without it after."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-002"
COLLATERAL: dict[str, str] = {}


def _empty(digest: Any) -> bool:
    return isinstance(digest, Mapping) and not any(
        digest.get(k)
        for k in ("tools_invoked", "observations_summary", "reasoning_summary", "artifacts_refs")
    )


class EmptyDigestDroppingMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        if isinstance(state, Mapping) and state.get("version") == 2:
            state = copy.copy(dict(state))
            for name in ("turns", "pending", "backlog"):
                records = state.get(name)
                if isinstance(records, list):
                    state[name] = [
                        {**r, "trajectory_digest": None}  # MUTATION
                        if isinstance(r, Mapping) and _empty(r.get("trajectory_digest"))
                        else r
                        for r in records
                    ]
        super().from_dict(state)


provider = mutant_provider("ser002-empty-digest-dropped-on-load", EmptyDigestDroppingMemory)
