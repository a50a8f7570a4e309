"""SER-003 broken: from_dict does not check a version 2 state's count of failed calls
against its health.

A HEALTHY state counting failed calls (or a RETRY state counting none) loads as written.
No memory writes one (a success resets the count): loaded, a HEALTHY memory's first
failure counts as its last retry and skips RETRY.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

from reference_impl import schema
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}

_loading = contextvars.ContextVar("ser003-failure-count-unchecked", default=False)
_check_failures = schema._check_failures


def _dispatch(*args: Any) -> None:
    if not _loading.get():  # every other memory keeps the reference's check
        _check_failures(*args)
    # MUTATION: otherwise the count is not checked


schema._check_failures = _dispatch


class UncheckedFailuresMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        token = _loading.set(True)
        try:
            super().from_dict(state)
        finally:
            _loading.reset(token)

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        token = _loading.set(True)
        try:
            await super().afrom_dict(state)
        finally:
            _loading.reset(token)


provider = mutant_provider("ser003-failure-count-unchecked", UncheckedFailuresMemory)
