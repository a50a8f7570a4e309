"""CON-002 broken: a summary's install replaces the shared state as it was when read.

The Redis backend writes turns with a compare-and-set, but the summarizer worker installs
its summary with a plain set of the state it read last: turns another instance added
while the summarizer ran (or since this instance last read) are overwritten. Two instances
on one key lose some of each other's turns; one instance alone loses only what its own
worker's outcome overwrites with a state it read before an await.

A mutant of the Redis backend on fakeredis (see ``con002_blind_writes``).
"""

from __future__ import annotations

import contextvars
from typing import Any

from stm_redis.memory import RedisShortTermMemory
from stm_redis.provider import fakeredis_provider

from stm_mutants import con002_blind_writes

BREAKS = "CON-002"
# Its outcome writes are as blind as every write of con002_blind_writes: the same
# collateral follows, for the same reasons.
COLLATERAL = dict(con002_blind_writes.COLLATERAL)
SLOW = "fakeredis runs every operation as a Lua script in process: five times the CPU"

_installing: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "con002-summary-install", default=False
)


class OverwritingInstallMemory(RedisShortTermMemory):
    async def _write(self, apply: Any, **kwargs: Any) -> Any:
        # A nonzero ``outcome``: the write of a summarizer outcome (a summary, a failure).
        token = _installing.set(bool(kwargs.get("outcome")))
        try:
            return await super()._write(apply, **kwargs)
        finally:
            _installing.reset(token)

    def _commit_args(self, doc: str, state: Any, **kwargs: Any) -> list[str]:
        if _installing.get():
            kwargs["expected"] = "*"  # MUTATION: the outcome's write wins
        return super()._commit_args(doc, state, **kwargs)


provider = fakeredis_provider("mutant-con002-summary-install-overwrites", OverwritingInstallMemory)
