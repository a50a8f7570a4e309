"""The memory protocol and its optional extensions, as in PenguiFlow."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from .types import ConversationTurn, MemoryHealth

__all__ = [
    "ShortTermMemory",
    "ShortTermMemoryArtifacts",
    "ShortTermMemoryPersistence",
    "ShortTermMemorySerializable",
]


@runtime_checkable
class ShortTermMemory(Protocol):
    """Minimal required protocol for short-term memory implementations."""

    @property
    def health(self) -> MemoryHealth: ...

    async def add_turn(self, turn: ConversationTurn) -> None: ...

    async def get_llm_context(self) -> Mapping[str, Any]: ...

    def estimate_tokens(self) -> int: ...

    async def flush(self) -> None: ...


@runtime_checkable
class ShortTermMemoryPersistence(Protocol):
    """Optional persistence extension, duck-typed against the store object."""

    async def persist(self, store: Any, key: str) -> None: ...

    async def hydrate(self, store: Any, key: str) -> None: ...


@runtime_checkable
class ShortTermMemorySerializable(Protocol):
    """Optional serialization extension for custom persistence backends."""

    def to_dict(self) -> dict[str, Any]: ...

    def from_dict(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class ShortTermMemoryArtifacts(Protocol):
    """Optional artifact access extension."""

    def get_artifact(self, ref: str) -> Any | None: ...
