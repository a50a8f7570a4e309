"""Helpers shared by mutants (not a mutant: its name starts with ``_``)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from reference_impl import keys, schema, watermark
from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.health import HealthMachine
from reference_impl.memory import DefaultShortTermMemory, logger
from reference_impl.types import ConversationTurn, MemoryHealth, MemoryIsolation, MemoryKey
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


def _switch(module: Any, name: str, mutated: Callable[..., Any]) -> contextvars.ContextVar[bool]:
    """Replace ``module.name`` by a function calling ``mutated`` while the returned context
    variable is true, the original otherwise."""
    original = getattr(module, name)
    active: contextvars.ContextVar[bool] = contextvars.ContextVar(f"mutated-{name}", default=False)

    def dispatch(*args: Any, **kwargs: Any) -> Any:
        return (mutated if active.get() else original)(*args, **kwargs)

    setattr(module, name, dispatch)
    return active


@contextlib.contextmanager
def _on(active: contextvars.ContextVar[bool]) -> Iterator[None]:
    """The mutated function inside the block (and tasks it starts)."""
    token = active.set(True)
    try:
        yield
    finally:
        active.reset(token)


def own_memory_only(
    module: Any, name: str, mutated: Callable[..., Any]
) -> type[DefaultShortTermMemory]:
    """Replace ``module.name`` by ``mutated`` for the memories of the returned class only:
    while their ``add_turn`` runs, and in the summarizer worker it starts (a task inherits
    the context). The meta-tests import every mutant in the processes that also run the
    reference's own tests, where every other memory must get the reference's function."""
    active = _switch(module, name, mutated)

    class OwnMemory(DefaultShortTermMemory):
        async def add_turn(self, turn: ConversationTurn) -> None:
            with _on(active):
                await super().add_turn(turn)

    return OwnMemory


Health = tuple[MemoryHealth, MemoryHealth]


@dataclasses.dataclass(frozen=True)
class WorkerChange:
    """How a mutant's summarizer worker differs from the reference's; each default is the
    reference's."""

    #: The loop ends once the memory is closed (``False``: only a cancel ends it).
    stops_when_closed: bool = True
    #: A failed call whose state ``from_dict`` replaced counts on the state loaded since.
    failure_counts_on_current_state: bool = False
    #: Says, of the state loaded since and the call's batch, whether a successful call
    #: whose state ``from_dict`` replaced installs its summary in the loaded state.
    success_adopted: Callable[[MemoryState, watermark.Batch], bool] | None = None
    #: Awaited with the health change before a failed call degrades the memory, instead of
    #: queueing the change for ``on_health_changed``.
    degrade_alert: Callable[[DefaultShortTermMemory, Health], Awaitable[None]] | None = None
    #: Awaited with the old and new summary once an install is settled, before ``flush()``
    #: waiters are told, instead of queueing them for ``on_summary_updated``.
    summary_alert: Callable[[DefaultShortTermMemory, str, str], Awaitable[None]] | None = None


async def work(memory: DefaultShortTermMemory, change: WorkerChange) -> None:
    """``DefaultShortTermMemory._work``, step for step, but for ``change``: the one copy of
    the reference's worker that mutants changing one of its steps share."""
    while not (memory._closed and change.stops_when_closed):
        state = memory._state
        batch = watermark.take_batch(state)
        if batch is None:
            return
        delay = state.health.wait_s(memory._now())
        if delay > 0:
            await memory._sleep(delay)
            continue
        if state.health.state is MemoryHealth.DEGRADED:
            memory._transition(state.health.begin_recovery(memory._now()))
        summary, error = await memory._call(batch)
        if memory._state is not state:
            if error is None:
                adopt = change.success_adopted
                adopted = adopt is not None and adopt(memory._state, batch)
            else:
                adopted = change.failure_counts_on_current_state
            if not adopted:
                continue  # from_dict replaced the state during the call
            state = memory._state
        if error is None:
            assert summary is not None
            error = memory._reject_summary(state, batch, summary)
        installed = None
        if error is None:
            assert summary is not None
            installed = (state.summary, summary)
            watermark.install(state, batch, summary)
            memory._transition(state.health.on_success())
            if change.summary_alert is None:
                memory._on_summary.emit(*installed)
        else:
            logger.warning("summarizer call failed: %s", error)
            health = state.health.on_failure(memory._now())
            degrades = (
                health[1] is MemoryHealth.DEGRADED and health[0] is not MemoryHealth.RECOVERING
            )
            if degrades and change.degrade_alert is not None:
                await change.degrade_alert(memory, health)
                watermark.degrade(state, memory._config)
            else:
                if degrades:
                    watermark.degrade(state, memory._config)
                memory._transition(health)
        try:
            memory._budget.settle(state)
        except Exception:
            logger.exception("token_estimator raised bringing the view within budget")
        if installed is not None and change.summary_alert is not None:
            await change.summary_alert(memory, *installed)
        memory._notify()
        await asyncio.sleep(0)


def with_health(health_class: type[HealthMachine]) -> type[DefaultShortTermMemory]:
    """The reference memory whose health machine is a ``health_class`` (a subclass of
    :class:`HealthMachine` with no fields of its own), from the start and after every load."""

    class Memory(DefaultShortTermMemory):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._state.health.__class__ = health_class

        def _install(self, loaded: MemoryState) -> None:
            loaded.health.__class__ = health_class
            super()._install(loaded)

    return Memory


def with_budget(budget_class: type[Budget]) -> type[DefaultShortTermMemory]:
    """The reference memory measuring and trimming with ``budget_class``, a ``Budget``
    subclass (with ``__slots__ = ()``) that changes one rule."""

    class BudgetMemory(DefaultShortTermMemory):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._budget = budget_class.for_config(self._config)

    return BudgetMemory


def hydrating_with(budget_class: type[Budget]) -> type[DefaultShortTermMemory]:
    """The reference memory whose ``afrom_dict`` (the stepwise load ``hydrate`` runs)
    measures with ``budget_class``, a ``Budget`` subclass (with ``__slots__ = ()``) that
    changes one rule; ``from_dict`` and everything else as the reference."""

    class HydrateBudgetMemory(DefaultShortTermMemory):
        async def afrom_dict(self, state: Mapping[str, Any]) -> None:
            budget = budget_class(self._config, self._budget.meter)
            steps = schema.load_steps(state, self._config, budget, self._state.key)
            while True:
                try:
                    next(steps)
                except StopIteration as done:
                    loaded: MemoryState = done.value
                    break
                await asyncio.sleep(0)
            self._install(loaded)

    return HydrateBudgetMemory


def own_loads_only(
    module: Any, name: str, mutated: Callable[..., Any]
) -> type[DefaultShortTermMemory]:
    """Replace ``module.name`` by ``mutated`` while the returned class's ``from_dict`` and
    ``afrom_dict`` run (the loads), for its memories only; see :func:`own_memory_only`."""
    active = _switch(module, name, mutated)

    class OwnLoads(DefaultShortTermMemory):
        def from_dict(self, state: Mapping[str, Any]) -> None:
            with _on(active):
                super().from_dict(state)

        async def afrom_dict(self, state: Mapping[str, Any]) -> None:
            with _on(active):
                await super().afrom_dict(state)

    return OwnLoads
