"""SER-003 broken: ``from_dict`` checks that turn numbers rise within each list, not across
them.

The order check validates ``backlog``, ``pending`` and ``turns`` one list at a time (each
strictly rising, all above ``summarized_through`` and below ``next_seq``), but not that
every backlog turn precedes every pending turn and every pending turn every recent one.
A record with ``pending`` ``[3, 4]`` and ``turns`` ``[2, 5]``, or a seq shared by a pending
and a recent turn, loads: two turns numbered alike, or a view showing a newer turn as
pending before an older recent one. SER-003: a state "whose turn numbers (``seq``) do not
rise strictly from the backlog through pending to the recent turns" is malformed and MUST
raise ``ValueError``.
"""

from __future__ import annotations

import itertools

from reference_impl import schema
from reference_impl.entries import Entry

from . import mutant_provider
from ._util import own_loads_only

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}


def _check_order(model: schema.MemoryStateV2, entries: dict[str, list[Entry]]) -> None:
    every = []
    for name in ("backlog", "pending", "turns"):
        seqs = [e.seq for e in entries[name]]
        # MUTATION: rising within each list; the lists are not compared with each other
        if any(b <= a for a, b in itertools.pairwise(seqs)):
            raise ValueError(f"turn sequence numbers must increase within {name}")
        every += seqs
    if every and min(every) <= model.summarized_through:
        raise ValueError("a retained turn is at or below the summarized_through watermark")
    if every and model.next_seq <= max(every):
        raise ValueError("next_seq must exceed every turn's sequence number")
    if model.summarized_through >= model.next_seq:
        raise ValueError("summarized_through must be below next_seq")


provider = mutant_provider(
    "ser003-seq-order-checked-per-list", own_loads_only(schema, "_check_order", _check_order)
)
