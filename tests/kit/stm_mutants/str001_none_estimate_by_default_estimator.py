"""STR-001 broken: strategy none's estimate_tokens() is a constant, the default
estimator's count of "{}" (1), whatever token_estimator is configured."""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import default_token_estimator

from . import mutant_provider

BREAKS = "STR-001"
COLLATERAL: dict[str, str] = {}

_EMPTY_TOKENS = default_token_estimator("{}")


class FixedNoneEstimateMemory(DefaultShortTermMemory):
    def estimate_tokens(self) -> int:
        if self._config.strategy == "none":
            return _EMPTY_TOKENS  # MUTATION: precomputed with the default estimator
        return super().estimate_tokens()


provider = mutant_provider("str001-none-estimate-by-default-estimator", FixedNoneEstimateMemory)
