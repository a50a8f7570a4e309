"""Backends that hang the conformance suite: it must end every check anyway.

Like ``tests/kit/mutants`` (and built the same way, on the reference backend), but each
module here breaks a requirement by *hanging*: looping forever in synchronous code,
ignoring cancellation, or waiting for something the check never gives. Each module exposes

- ``provider``: the reference provider creating the hanging memory;
- ``FAILS``: a requirement ID the suite must report as failed because of the hang;
- ``REASON``: the reason a timed-out check names (``stm_conformance._deadline.BLOCKED`` or
  ``AWAITED_FOREVER``);
- ``CHECK``: the name of a check that must fail with ``REASON`` and a stack;
- ``WALL_S``: how long the whole suite may take against it (``tests/kit/test_hangs.py``
  gives it a time limit per check no check comes near).

``tests/kit/test_hangs.py`` runs the whole suite against each of them in a subprocess, as
``--stm-backend=hangs.<module>:provider`` with ``tests/kit`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import dataclasses
import pkgutil
from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.provider import provider as reference_provider
from reference_impl.types import MemoryKey, ShortTermMemoryConfig, Summarizer
from stm_conformance.provider import Provider

__all__ = ["hang_modules", "hang_provider"]


def hang_provider(name: str, memory_class: type[DefaultShortTermMemory]) -> Provider:
    """The reference provider, creating ``memory_class`` instead of the reference memory."""

    async def create(config: ShortTermMemoryConfig, key: MemoryKey, summarizer: Summarizer) -> Any:
        return memory_class(config=config, summarizer=summarizer, key=key)

    return dataclasses.replace(reference_provider, name=f"hang-{name}", create=create)


def hang_modules() -> list[str]:
    """The names of the hanging backends in this package, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
