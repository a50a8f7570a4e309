"""STR-004 broken: a trajectory digest that lists no tools is dropped when the turn is stored.

PenguiFlow's digest builder returns no digest for a run that used no tools, and the backend
normalises stored turns the same way: a ``TrajectoryDigest`` with an empty
``tools_invoked`` is replaced by ``None`` in ``add_turn``. But such a digest may still carry
observations, reasoning or artifact references, and the turn has a digest: it must render
with ``trajectory_digest`` (in the view and in the summarizer payload). Digests listing at
least one tool are kept as by the reference.
"""

from __future__ import annotations

import dataclasses

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn, TrajectoryDigest

from . import mutant_provider

BREAKS = "STR-004"
COLLATERAL: dict[str, str] = {}


class ToollessDigestDroppingMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        digest = getattr(turn, "trajectory_digest", None)
        if (
            isinstance(turn, ConversationTurn)
            and isinstance(digest, TrajectoryDigest)
            and isinstance(digest.tools_invoked, list)
            and not digest.tools_invoked
        ):
            # MUTATION: "no tools, no digest", whatever else the digest holds
            turn = dataclasses.replace(turn, trajectory_digest=None)
        await super().add_turn(turn)


provider = mutant_provider("str004-empty-tools-digest-dropped", ToollessDigestDroppingMemory)
