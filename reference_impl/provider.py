"""The reference implementation as a conformance backend (``--stm-backend=reference``)."""

from __future__ import annotations

from typing import Any

from stm_conformance.capabilities import CAPABILITIES
from stm_conformance.provider import Provider

from .keys import resolve_memory_key
from .memory import DefaultShortTermMemory
from .types import MemoryIsolation, MemoryKey, ShortTermMemoryConfig, Summarizer

__all__ = ["provider"]


async def _create(
    config: ShortTermMemoryConfig, key: MemoryKey, summarizer: Summarizer
) -> DefaultShortTermMemory:
    return DefaultShortTermMemory(config=config, summarizer=summarizer, key=key)


def _resolve_key(
    isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any
) -> MemoryKey | None:
    return resolve_memory_key(isolation, memory_key=explicit, tool_context=tool_context)


#: Every capability except ``shared_state``: each memory is a single in-process instance.
provider = Provider(
    name="reference",
    create=_create,
    capabilities=CAPABILITIES - {"shared_state"},
    resolve_key=_resolve_key,
)
