"""STR-001 broken: a memory with strategy ``none`` reports ``estimate_tokens() == 0``.

"Configured off costs nothing" is taken literally: the token count of a ``none`` memory is
hard-wired to 0. But its view is ``{}``, and the estimator applied to ``"{}"`` is 1 with
the default estimator: a caller adding ``estimate_tokens()`` to its prompt budget is told
less than what ``get_llm_context()`` contributes. Other strategies count as the reference.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "STR-001"
COLLATERAL: dict[str, str] = {}


class ZeroCostNoneMemory(DefaultShortTermMemory):
    def estimate_tokens(self) -> int:
        if self._config.strategy == "none":
            return 0  # MUTATION: not the estimator applied to the canonical JSON of {}
        return super().estimate_tokens()


provider = mutant_provider("str001-none-estimate-zero", ZeroCostNoneMemory)
