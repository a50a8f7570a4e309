"""Deliberately broken backends: each breaks exactly one requirement of ``docs/spec.md``.

Every module here is a *mutant* of the reference backend: a subclass of
:class:`reference_impl.DefaultShortTermMemory` (or a reference part injected into one) with
one small, marked change (``# MUTATION``). Each module exposes

- ``provider``: a :class:`stm_conformance.provider.Provider` with the reference provider's
  capabilities and key resolver, so the suite runs exactly the checks it runs for the
  reference (``--stm-backend=stm_mutants.<module>:provider`` with ``tests/kit`` on the path);
- ``BREAKS``: the requirement ID the mutation violates;
- ``COLLATERAL``: other IDs the whole suite may also report as failed, each with the
  reason it follows from the one bug (usually empty: a failure is blamed on one
  requirement, and a check that trips on another requirement's precondition blames that);
- ``GAP`` (optional): why the suite does *not* catch this mutant yet. Such a mutant
  documents a known gap of the suite; the meta-test expects its run to miss ``BREAKS``
  (strict xfail) and reports an unexpected pass once a check catches it;
- ``SLOW`` (optional): why the suite takes long against this mutant (its run is started
  before the others).

``tests/kit/test_mutants.py`` requires the suite to report ``BREAKS`` as failed and nothing
outside ``BREAKS`` and ``COLLATERAL``. A mutant's run there runs only the checks that call a
function of the reference it replaces (``tests/kit/stm_impact.py``): a change made as
functions (overrides, ``_util``'s helpers, a key resolver or storage key given to the
provider) keeps the run short, while data on a reference subclass under a name the
reference or the kit reads, a replaced constant or a provider that creates memories its
own way makes it run every check.

Importing a mutant changes nothing for any other memory: the meta-tests import every
mutant in the processes that also run the reference's own tests. A mutant that replaces a
module's function does it for its own memory only (``_util.own_memory_only``); one that
changes a step of the summarizer worker runs the reference's worker with that step changed
(``_util.work``), rather than a copy of it; one that changes the health machine gives its
subclass to ``_util.with_health``, and one that changes the budget its ``Budget`` subclass
to ``_util.with_budget`` (or, for ``hydrate``'s load alone, to
``_util.hydrating_with``); one that changes a step of a load replaces it for its loads
only (``_util.own_loads_only``).

A requirement only a backend of shared state has (CON-002: ``shared_state``, which the
reference does not declare) is broken in the Redis backend instead, run on fakeredis: its
mutant subclasses ``stm_redis.RedisShortTermMemory`` and gives it to
``stm_redis.provider.fakeredis_provider``, whose capabilities are all of them.
"""

from __future__ import annotations

import dataclasses
import pkgutil
from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.provider import provider as reference_provider
from reference_impl.types import MemoryKey, ShortTermMemoryConfig, Summarizer
from stm_conformance.provider import Provider

__all__ = ["mutant_modules", "mutant_provider", "reference_provider"]


def mutant_provider(name: str, memory_class: type[DefaultShortTermMemory]) -> Provider:
    """The reference provider, creating ``memory_class`` instead of the reference memory."""

    async def create(config: ShortTermMemoryConfig, key: MemoryKey, summarizer: Summarizer) -> Any:
        return memory_class(config=config, summarizer=summarizer, key=key)

    return dataclasses.replace(reference_provider, name=f"mutant-{name}", create=create)


def mutant_modules() -> list[str]:
    """The names of the mutant modules in this package, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
