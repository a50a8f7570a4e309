"""Helpers shared by mutants (not a mutant: its name starts with ``_``)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from reference_impl import keys
from reference_impl.types import MemoryIsolation, MemoryKey
from stm_conformance.provider import Provider

from . import reference_provider


@contextlib.contextmanager
def swapped(module: Any, name: str, value: Any) -> Iterator[None]:
    """``module.name`` is ``value`` inside the block (for the mutant's own calls only)."""
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


def key_resolving_provider(name: str, **replaced: Callable[..., Any]) -> Provider:
    """The reference provider, resolving keys with the reference's
    ``keys.resolve_memory_key`` in which the named helpers (``_part``, ``extract_path``)
    are replaced: the one change a key mutant makes, the rest as the reference has it."""

    def resolve(
        isolation: MemoryIsolation, explicit: MemoryKey | None, tool_context: Any
    ) -> MemoryKey | None:
        with contextlib.ExitStack() as stack:
            for attr, value in replaced.items():
                stack.enter_context(swapped(keys, attr, value))
            return keys.resolve_memory_key(
                isolation, memory_key=explicit, tool_context=tool_context
            )

    return dataclasses.replace(reference_provider, name=f"mutant-{name}", resolve_key=resolve)
