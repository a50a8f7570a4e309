"""The contract's data types, re-exported for PenguiFlow-compatible imports.

Their home is :mod:`stm_conformance.contract`: the kit owns the contract, and every backend,
this one included, implements it.
"""

from __future__ import annotations

from stm_conformance.contract import (
    MAX_KEY_COMPONENT_LENGTH,
    OVERFLOW_POLICIES,
    STRATEGIES,
    ConversationTurn,
    MemoryBudget,
    MemoryBudgetExceeded,
    MemoryHealth,
    MemoryIsolation,
    MemoryKey,
    OverflowPolicy,
    ShortTermMemoryConfig,
    Strategy,
    Summarizer,
    TokenEstimator,
    TrajectoryDigest,
    default_token_estimator,
)

__all__ = [
    "MAX_KEY_COMPONENT_LENGTH",
    "OVERFLOW_POLICIES",
    "STRATEGIES",
    "ConversationTurn",
    "MemoryBudget",
    "MemoryBudgetExceeded",
    "MemoryHealth",
    "MemoryIsolation",
    "MemoryKey",
    "OverflowPolicy",
    "ShortTermMemoryConfig",
    "Strategy",
    "Summarizer",
    "TokenEstimator",
    "TrajectoryDigest",
    "default_token_estimator",
]
