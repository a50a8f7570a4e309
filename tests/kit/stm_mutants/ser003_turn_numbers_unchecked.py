"""SER-003 broken: from_dict does not check the turn numbers of a version 2 state.

Each turn record's ``seq`` is taken as written: two turns numbered alike, turns numbered
out of the order the state holds them, a ``next_seq`` at or below a turn's, or a turn at
or below ``summarized_through`` all load. The schema checks each number alone; their
order is the loader's to check, and a state that breaks it is malformed.
"""

from __future__ import annotations

from typing import Any

from reference_impl import schema

from . import mutant_provider
from ._util import own_loads_only

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}


def _unchecked(*args: Any) -> None:
    pass  # MUTATION: the order is not checked


UncheckedMemory = own_loads_only(schema, "_check_order", _unchecked)

provider = mutant_provider("ser003-turn-numbers-unchecked", UncheckedMemory)
