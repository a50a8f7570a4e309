"""SER-003 broken: a version 2 turn record whose ``seq`` is ``true`` loads as turn number 1.

The fast reader of stored turns tests ``isinstance(seq, int)`` where ``type(seq) is int`` is
meant, and ``bool`` is an ``int``: ``{"seq": true, ...}`` reads as ``seq == 1``. The schema
(strict) refuses a boolean where an integer is required, so the state is malformed and must
not load. Spec, SER-003: "``from_dict`` of malformed input MUST raise ``ValueError`` ... In
the reference format (version 2), so is ... a state the schema refuses".
"""

from __future__ import annotations

from typing import Any

from reference_impl import schema

from . import mutant_provider
from ._util import own_loads_only

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}

_read = schema.read_plain_turn


def _read_plain_turn(raw: Any) -> Any:
    if type(raw) is dict and isinstance(raw.get("seq"), bool):
        raw = {**raw, "seq": int(raw["seq"])}  # MUTATION: isinstance(seq, int) lets a bool in
    return _read(raw)


BoolSeqMemory = own_loads_only(schema, "read_plain_turn", _read_plain_turn)

provider = mutant_provider("ser003-bool-seq-accepted", BoolSeqMemory)
