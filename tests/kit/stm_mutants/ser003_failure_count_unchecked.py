"""SER-003 broken: from_dict does not check a version 2 state's count of failed calls
against its health.

A HEALTHY state counting failed calls (or a RETRY state counting none) loads as written.
No memory writes one (a success resets the count): loaded, a HEALTHY memory's first
failure counts as its last retry and skips RETRY.
"""

from __future__ import annotations

from typing import Any

from reference_impl import schema

from . import mutant_provider
from ._util import own_loads_only

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}


def _unchecked(*args: Any) -> None:
    pass  # MUTATION: the count is not checked


UncheckedFailuresMemory = own_loads_only(schema, "_check_failures", _unchecked)

provider = mutant_provider("ser003-failure-count-unchecked", UncheckedFailuresMemory)
