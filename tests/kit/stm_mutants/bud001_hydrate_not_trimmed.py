"""BUD-001 broken: ``hydrate`` (the stepwise, asynchronous load ``afrom_dict``) does not
bring the loaded view within ``total_max_tokens``.

The async loader was written separately from ``from_dict``: it brings recent within the
window and clips the summary to ``summary_max_tokens``, but skips the trimming pass
("records in the store were written under a budget"). A record written by a memory with a
larger (or no) ``total_max_tokens`` hydrates over this memory's limit until the next
``add_turn`` or summarizer outcome trims it. ``from_dict`` trims as the reference does.
Spec, BUD-001: "After every operation, with ``total_max_tokens > 0`` and a truncate
policy, ``estimate_tokens() <= total_max_tokens``" (section 10: "a state loaded under a
smaller ``total_max_tokens`` is brought within it").
"""

from __future__ import annotations

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState

from . import mutant_provider
from ._util import hydrating_with

BREAKS = "BUD-001"
COLLATERAL: dict[str, str] = {}


class UntrimmedLoadBudget(Budget):
    __slots__ = ()

    def settle(self, state: MemoryState) -> None:
        state.show_all_pending()  # MUTATION: the visible run reset, the budget not enforced


provider = mutant_provider("bud001-hydrate-not-trimmed", hydrating_with(UntrimmedLoadBudget))
