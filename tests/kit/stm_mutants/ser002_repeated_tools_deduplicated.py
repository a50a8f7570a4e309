"""SER-002 broken: ``to_dict()`` writes each digest's ``tools_invoked`` without repeats.

A "compacting" serializer: a turn that called ``search`` three times is saved as having
called it once (``list(dict.fromkeys(tools))``, order kept). The live view renders the
digest as given (``["search", "fetch", "search"]``); the restored one renders
``["search", "fetch"]``, so view and ``estimate_tokens()`` differ after
``from_dict(to_dict())``. SER-002: the round trip "MUST be observably identical: same view,
``health``, ``estimate_tokens()``". Digests without a repeated tool round-trip exactly;
``persist`` writes what the reference does.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-002"
COLLATERAL: dict[str, str] = {}


class CompactingMemory(DefaultShortTermMemory):
    def to_dict(self) -> dict[str, Any]:
        state = super().to_dict()
        for name in ("turns", "pending", "backlog"):
            for record in state[name]:
                digest = record.get("trajectory_digest")
                if digest is not None:
                    # MUTATION: a tool called several times is listed once
                    digest["tools_invoked"] = list(dict.fromkeys(digest["tools_invoked"]))
        return state


provider = mutant_provider("ser002-repeated-tools-deduplicated", CompactingMemory)
