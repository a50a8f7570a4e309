"""SER-001 broken: the config snapshot in to_dict() (and persisted states) is built from
every field of the configuration: callbacks and a custom token_estimator are written as the
callables they are, so to_dict() is not JSON-serialisable for such a memory. With the
default config (no callbacks, default estimator) it is plain JSON."""

from __future__ import annotations

import dataclasses
from collections.abc import Coroutine
from typing import Any

from reference_impl import schema
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import swapped

BREAKS = "SER-001"
COLLATERAL: dict[str, str] = {}


def _snapshot(config: Any) -> dict[str, Any]:
    # MUTATION: every field, callables included
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        out[f.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return out


class EveryFieldMemory(DefaultShortTermMemory):
    def to_dict(self) -> dict[str, Any]:
        with swapped(schema, "config_snapshot", _snapshot):
            return super().to_dict()

    def _persisting(self, store: Any, key: str) -> Coroutine[Any, Any, None] | None:
        with swapped(schema, "config_snapshot", _snapshot):
            return super()._persisting(store, key)


provider = mutant_provider("ser001-snapshot-of-every-field", EveryFieldMemory)
