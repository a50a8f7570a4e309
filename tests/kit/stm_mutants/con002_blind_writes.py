"""CON-002 broken: every write of the Redis backend replaces the shared state as it is.

The backend's compare-and-set is turned into a plain set: each instance writes the state
it read last, whatever another instance wrote since ("last writer wins"). One instance
alone loses nothing (its writes follow one another); two adding turns to one key at once
overwrite each other's turns.

A mutant of the Redis backend on fakeredis, not of the reference: CON-002 holds only for
backends whose state is shared across instances (``shared_state``), which the reference's
is not.
"""

from __future__ import annotations

from typing import Any

from stm_redis.memory import RedisShortTermMemory
from stm_redis.provider import fakeredis_provider

BREAKS = "CON-002"
COLLATERAL = {
    "HLT-006": (
        "the worker's outcome of the replaced state's failed recovery attempt, written "
        "blind, can land over a state from_dict loaded meanwhile and end the interval the "
        "load started"
    ),
}
SLOW = "fakeredis runs every operation as a Lua script in process: five times the CPU"


class BlindWriteMemory(RedisShortTermMemory):
    def _commit_args(self, doc: str, state: Any, **kwargs: Any) -> list[str]:
        kwargs["expected"] = "*"  # MUTATION: whatever revision the state is at now
        return super()._commit_args(doc, state, **kwargs)


provider = fakeredis_provider("mutant-con002-blind-writes", BlindWriteMemory)
