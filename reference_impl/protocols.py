"""The memory protocol and its optional extensions, re-exported from the kit's contract."""

from __future__ import annotations

from stm_conformance.contract import (
    ShortTermMemory,
    ShortTermMemoryArtifacts,
    ShortTermMemoryPersistence,
    ShortTermMemorySerializable,
)

__all__ = [
    "ShortTermMemory",
    "ShortTermMemoryArtifacts",
    "ShortTermMemoryPersistence",
    "ShortTermMemorySerializable",
]
