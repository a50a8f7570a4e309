"""Reference implementation of short-term memory for LLM agents.

Public names and signatures match PenguiFlow's ``penguiflow.planner.memory``; see
``docs/spec.md`` for the contract this implementation keeps.
"""

from .keys import extract_path, resolve_memory_key
from .memory import DefaultShortTermMemory
from .protocols import (
    ShortTermMemory,
    ShortTermMemoryArtifacts,
    ShortTermMemoryPersistence,
    ShortTermMemorySerializable,
)
from .schema import KeyMismatchError, MemoryStateV2
from .tokens import LengthBasedEstimator, canonical_json
from .types import (
    ConversationTurn,
    MemoryBudget,
    MemoryBudgetExceeded,
    MemoryHealth,
    MemoryIsolation,
    MemoryKey,
    ShortTermMemoryConfig,
    TrajectoryDigest,
    default_token_estimator,
)

__version__ = "0.1.0"

__all__ = [
    "ConversationTurn",
    "DefaultShortTermMemory",
    "KeyMismatchError",
    "LengthBasedEstimator",
    "MemoryBudget",
    "MemoryBudgetExceeded",
    "MemoryHealth",
    "MemoryIsolation",
    "MemoryKey",
    "MemoryStateV2",
    "ShortTermMemory",
    "ShortTermMemoryArtifacts",
    "ShortTermMemoryConfig",
    "ShortTermMemoryPersistence",
    "ShortTermMemorySerializable",
    "TrajectoryDigest",
    "canonical_json",
    "default_token_estimator",
    "extract_path",
    "resolve_memory_key",
]
