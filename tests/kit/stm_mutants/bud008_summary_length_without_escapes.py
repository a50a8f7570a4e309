"""BUD-008 broken: the summary's share of the estimate is its text plus two quotes, as if
no character needed a JSON escape.

The memory caches the summary's JSON form as ``'"' + text + '"'`` (a "JSON string is the
text in quotes" shortcut) instead of the encoded literal. A summary holding newlines,
quotes, backslashes or control characters -- LLM summaries are often bulleted lists, one
item per line -- is then counted short: each ``\\n`` is 2 characters in the canonical JSON
of the view, 1 in the count. ``estimate_tokens()`` is below the estimator applied to the
canonical JSON of ``get_llm_context()``, and the budget lets such views run over. BUD-008:
"``estimate_tokens()`` MUST equal the estimator applied to the canonical JSON of
``get_llm_context()``". Summaries without such characters are measured exactly.
"""

from __future__ import annotations

from reference_impl import entries

from . import mutant_provider
from ._util import own_loads_only, own_memory_only


def _quoted(text: str) -> str:
    return f'"{text}"'  # MUTATION: no escaping


BREAKS = "BUD-008"
COLLATERAL = {
    "BUD-001": "a view whose summary needs escapes is counted short, so the budget keeps a "
    "view over total_max_tokens",
}


class QuotedSummaryMemory(
    own_memory_only(entries, "json_string", _quoted),  # type: ignore[misc]
    own_loads_only(entries, "json_string", _quoted),  # type: ignore[misc]
):
    pass


provider = mutant_provider("bud008-summary-length-without-escapes", QuotedSummaryMemory)
