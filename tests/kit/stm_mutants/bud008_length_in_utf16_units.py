"""BUD-008 broken: ``estimate_tokens()`` measures the view's length in UTF-16 code units.

The token count is computed from the canonical JSON's length as a JavaScript client would
see it (UTF-16 code units), so each character outside the Basic Multilingual Plane (emoji,
mathematical letters) counts twice. The estimator is defined on Python strings: the view's
count is ``len(text) // 4 + 1`` by code points. Views of BMP text count as the reference.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.tokens import canonical_json
from reference_impl.types import default_token_estimator

from . import mutant_provider

BREAKS = "BUD-008"
COLLATERAL: dict[str, str] = {}


class Utf16LengthMemory(DefaultShortTermMemory):
    def estimate_tokens(self) -> int:
        if self._config.token_estimator not in (None, default_token_estimator):
            return super().estimate_tokens()
        text = canonical_json(self._view())
        units = len(text.encode("utf-16-le")) // 2  # MUTATION: astral characters count twice
        return units // 4 + 1


provider = mutant_provider("bud008-length-in-utf16-units", Utf16LengthMemory)
