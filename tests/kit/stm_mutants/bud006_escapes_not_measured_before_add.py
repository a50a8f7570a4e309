"""BUD-006 broken: under ``error``, a new turn is sized from its raw text, not its JSON.

Before admitting a turn, the ``error`` policy estimates what it adds to the view as the
length of ``{"assistant":"","user":""}`` plus the lengths of its two texts: exact for
plain text, but every character JSON escapes (a quote, a backslash, a newline, a control
character) takes two or six characters in the canonical JSON. A turn of such text is
admitted although the view then exceeds ``total_max_tokens``. Turns with a digest, and
every measurement after the turn is stored, are measured as in the reference.
"""

from __future__ import annotations

import dataclasses

from reference_impl.budget import Budget
from reference_impl.entries import Entry, MemoryState

from . import mutant_provider
from ._util import with_budget

BREAKS = "BUD-006"
COLLATERAL: dict[str, str] = {}

_EMPTY_TURN = len('{"assistant":"","user":""}')


class RawLengthBudget(Budget):
    __slots__ = ()

    def fits_after_add(self, state: MemoryState, entry: Entry) -> bool:
        if not self.limit or self.meter.from_length is None or len(entry.rendered) != 2:
            return super().fits_after_add(state, entry)
        entry.measure(self.meter.size_of)
        rendered = entry.rendered
        # MUTATION: the text's length, not its JSON's.
        raw = _EMPTY_TURN + len(rendered["user"]) + len(rendered["assistant"])
        return super().fits_after_add(state, dataclasses.replace(entry, size=raw))


provider = mutant_provider("bud006-escapes-not-measured-before-add", with_budget(RawLengthBudget))
