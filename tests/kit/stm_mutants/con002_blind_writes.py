"""CON-002 broken: every write of the Redis backend replaces the shared state as it is.

The backend's compare-and-set is turned into a plain set: each instance writes the state
it read last, whatever another instance wrote since ("last writer wins"). Two instances
adding turns to one key at once overwrite each other's turns; one instance alone loses
only what its own worker overwrites with a state it read before an await.

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
    "WM-004": (
        "the outcome of a failed call, written back blind over a from_dict made during its "
        "backoff, brings back the replaced state: the next call is sent its turns"
    ),
    "CON-001": (
        "a recovery attempt the worker starts while turns are added (on a loaded machine, "
        "once degraded_retry_interval_s has passed) writes back, blind, the state it read "
        "before them: those turns are lost"
    ),
    "WM-007": (
        "the same blind write-back of a state read before turns were added undoes what "
        "flush() waited on: seen on a loaded machine as flush() returning, the memory not "
        "degraded, with 22 turns still pending (con002_summary_install_overwrites)"
    ),
    "HLT-006": (
        "the worker's outcome of the replaced state's failed recovery attempt, written "
        "blind, can land over a state from_dict loaded meanwhile and end the interval the "
        "load started"
    ),
    "HLT-002": (
        "the worker's outcome of the replaced state's failed call, written blind, can land "
        "over a RETRY state from_dict loaded meanwhile and bring its retry sooner (seen on "
        "a loaded machine: retry 2 came 0.285 s after the load, against 0.6 s)"
    ),
    "HLT-005": (
        "a recovery attempt the worker starts while turns are added (on a loaded machine, "
        "once degraded_retry_interval_s has passed) writes back, blind, the state it read "
        "before them: the drops those turns counted are lost"
    ),
}
SLOW = "fakeredis runs every operation as a Lua script in process: five times the CPU"


class BlindWriteMemory(RedisShortTermMemory):
    def _commit_args(self, doc: str, state: Any, **kwargs: Any) -> list[str]:
        kwargs["expected"] = "*"  # MUTATION: whatever revision the state is at now
        return super()._commit_args(doc, state, **kwargs)


provider = fakeredis_provider("mutant-con002-blind-writes", BlindWriteMemory)
