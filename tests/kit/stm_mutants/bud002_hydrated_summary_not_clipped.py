"""BUD-002 broken: ``hydrate`` installs a stored summary over ``summary_max_tokens`` whole.

``from_dict`` clips a loaded summary over the limit to its newest text, as the reference
does; ``hydrate`` (the asynchronous, stepwise load, ``afrom_dict``) trusts records it
reads from the store ("a memory wrote them, so they are within budget") and skips the
clip. A record written under a larger ``summary_max_tokens`` (a configuration change
across a deploy) hydrates with its whole summary. Spec, BUD-002: "The size of the
installed summary MUST NOT exceed ``summary_max_tokens``" (section 10: "a loaded summary
over ``summary_max_tokens`` is clipped or refused").
"""

from __future__ import annotations

from reference_impl.budget import Budget

from . import mutant_provider
from ._util import hydrating_with

BREAKS = "BUD-002"
COLLATERAL: dict[str, str] = {}


class TrustingBudget(Budget):
    __slots__ = ()

    def summary_fits(self, summary: str) -> bool:
        return True  # MUTATION: a stored summary is taken as within summary_max_tokens


provider = mutant_provider("bud002-hydrated-summary-not-clipped", hydrating_with(TrustingBudget))
