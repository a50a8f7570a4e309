"""State stores for short-term memory: in-memory and SQLite."""

from reference_impl.store import (
    ConditionalStateStore,
    CorruptStateError,
    InvalidStateError,
    StaleStateError,
    StateStore,
    StateStoreError,
    supports_conditional_save,
)

from .memory import InMemoryStateStore
from .sqlite import SQLiteStateStore

__all__ = [
    "ConditionalStateStore",
    "CorruptStateError",
    "InMemoryStateStore",
    "InvalidStateError",
    "SQLiteStateStore",
    "StaleStateError",
    "StateStore",
    "StateStoreError",
    "supports_conditional_save",
]
