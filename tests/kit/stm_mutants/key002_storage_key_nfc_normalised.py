"""KEY-002 broken: the storage key is Unicode-normalised (NFC) before it is used.

The backend normalises the composite key so that a session id typed on two devices (one
sending ``"café"`` precomposed, the other ``"cafe\\u0301"`` decomposed) reaches one record.
But those are two distinct ``MemoryKey`` values: normalisation merges them, so their
memories overwrite each other in a shared store. ASCII keys are stored as by the reference.
"""

from __future__ import annotations

import dataclasses
import unicodedata

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryKey

from . import mutant_provider

BREAKS = "KEY-002"
COLLATERAL: dict[str, str] = {}


def _storage_key(key: MemoryKey) -> str:
    # MUTATION: canonically equivalent but distinct keys get one storage key
    return unicodedata.normalize("NFC", key.composite())


provider = dataclasses.replace(
    mutant_provider("key002-storage-key-nfc-normalised", DefaultShortTermMemory),
    storage_key=_storage_key,
)
