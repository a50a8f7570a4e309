"""How a backend plugs into the kit: a :class:`Provider`, found by :func:`load_provider`.

A provider is registered under a short name in the entry-point group
``stm_conformance.backends`` or named directly as ``package.module:attribute``.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .capabilities import CAPABILITIES
from .contract import (
    MemoryBudgetExceeded,
    MemoryIsolation,
    MemoryKey,
    ShortTermMemoryConfig,
    Summarizer,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "MemoryFactory",
    "Provider",
    "ProviderError",
    "KeyResolver",
    "StorageKey",
    "load_provider",
    "registered_backends",
]

#: Entry-point group where backends register their provider under a short name.
ENTRY_POINT_GROUP = "stm_conformance.backends"

#: ``await create(config, key, summarizer)`` -> a fresh memory.
MemoryFactory = Callable[[ShortTermMemoryConfig, MemoryKey, Summarizer], Awaitable[Any]]
#: ``resolve_key(isolation, explicit_key, tool_context)`` -> the key for one call, or ``None``.
KeyResolver = Callable[[MemoryIsolation, MemoryKey | None, Any], MemoryKey | None]
#: ``storage_key(key)`` -> the string a memory of ``key`` is stored under.
StorageKey = Callable[[MemoryKey], str]


class ProviderError(LookupError):
    """A backend name does not resolve to a valid :class:`Provider`."""


@dataclass(frozen=True, slots=True)
class Provider:
    """Everything the kit needs to know about one backend.

    The kit passes its own types (:class:`~stm_conformance.contract.ShortTermMemoryConfig`,
    :class:`~stm_conformance.contract.MemoryKey`, a summarizer callable); converting them to
    the backend's types is the provider's job. Checks read memories only through the
    protocol methods and JSON-level outputs (``get_llm_context()``, ``to_dict()``,
    ``health.value``).
    """

    #: Human-readable backend name, shown in the header and the report.
    name: str
    #: ``await create(config, key, summarizer)``: a fresh memory for one check.
    create: MemoryFactory
    #: Declared capabilities (names from :data:`~stm_conformance.capabilities.CAPABILITIES`).
    capabilities: frozenset[str] = frozenset()
    #: A second instance on the same key, for ``shared_state`` backends.
    create_peer: MemoryFactory | None = None
    #: ``await make_store()``: a fresh store for persistence checks; default: the kit's
    #: :class:`~stm_conformance.store.KitStateStore`.
    make_store: Callable[[], Awaitable[Any]] | None = None
    #: Session-wide setup and teardown (start a server, create a schema, ...).
    lifespan: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None
    #: How to dispose of a memory; default: ``await memory.aclose()`` when it has one.
    close: Callable[[Any], Awaitable[None]] | None = None
    #: Key resolution for ``key_resolution`` checks (KEY-003..006).
    resolve_key: KeyResolver | None = None
    #: The storage key the backend derives from a :class:`MemoryKey` (KEY-002): what
    #: ``persist``/``hydrate`` are called with. Default: ``MemoryKey.composite()``.
    storage_key: StorageKey | None = None
    #: The exception class(es) the backend raises for a turn that does not fit under
    #: ``overflow_policy="error"`` (BUD-006). Default: the contract's ``MemoryBudgetExceeded``.
    budget_exceeded_error: type[BaseException] | tuple[type[BaseException], ...] = (
        MemoryBudgetExceeded
    )

    def key_for_storage(self, key: MemoryKey) -> str:
        """``storage_key(key)`` if given, else ``key.composite()``."""
        return key.composite() if self.storage_key is None else self.storage_key(key)

    async def dispose(self, memory: Any) -> None:
        """Close a memory: ``close(memory)`` if given, else ``await memory.aclose()`` if any."""
        if self.close is not None:
            await self.close(memory)
            return
        aclose = getattr(memory, "aclose", None)
        if aclose is not None:
            await aclose()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ProviderError("Provider.name must be a non-empty string")
        if not callable(self.create):
            raise ProviderError(f"Provider {self.name!r}: create must be an async callable")
        if not isinstance(self.capabilities, frozenset):
            raise ProviderError(f"Provider {self.name!r}: capabilities must be a frozenset")
        errors = self.budget_exceeded_error
        classes = errors if isinstance(errors, tuple) else (errors,)
        if not classes or not all(
            isinstance(c, type) and issubclass(c, BaseException) for c in classes
        ):
            raise ProviderError(
                f"Provider {self.name!r}: budget_exceeded_error must be an exception class "
                "or a non-empty tuple of them"
            )
        if self.storage_key is not None and not callable(self.storage_key):
            raise ProviderError(f"Provider {self.name!r}: storage_key must be callable")
        unknown = sorted(self.capabilities - CAPABILITIES)
        if unknown:
            raise ProviderError(
                f"Provider {self.name!r} declares unknown capabilities {unknown}; "
                f"known: {', '.join(sorted(CAPABILITIES))}"
            )
        # Refused here rather than found by a probe: the checks of these capabilities
        # would fail (or be skipped) one by one, none saying what is missing.
        for capability, field, value in (
            ("key_resolution", "resolve_key", self.resolve_key),
            ("shared_state", "create_peer", self.create_peer),
        ):
            if capability in self.capabilities and value is None:
                raise ProviderError(
                    f"Provider {self.name!r} declares {capability} but gives no {field}, "
                    "which that capability's checks call"
                )


def registered_backends() -> dict[str, str]:
    """Short name -> ``module:attribute`` of every backend registered by an installed package."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_provider(name: str) -> tuple[Provider, str]:
    """Resolve a backend name to its provider.

    Args:
        name: a short name registered in the ``stm_conformance.backends`` entry-point group,
            or ``package.module:attribute`` where the attribute is a :class:`Provider` or a
            zero-argument callable returning one.

    Returns:
        The provider and the ``module:attribute`` it was loaded from.

    Raises:
        ProviderError: the name does not resolve, the import fails, or the object is not a
            provider. The message lists the registered names.
    """
    name = name.strip()
    if not name:
        raise ProviderError(_with_known("empty backend name"))
    if ":" in name:
        return _load_target(name), name
    registered = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if name not in registered:
        raise ProviderError(_with_known(f"unknown backend {name!r}"))
    target = registered[name].value
    try:
        return _load_target(target), target
    except ProviderError as exc:
        hint = _extra_hint(registered[name], exc)
        if hint is None:
            raise
        raise ProviderError(f"{exc}; {hint}") from exc.__cause__


def _extra_hint(entry_point: EntryPoint, exc: ProviderError) -> str | None:
    """How to install what a registered backend misses, when the package that registers
    it has an extra of the backend's name (``stm-conformance[fakeredis]``)."""
    dist = entry_point.dist
    # Only where importing the backend's module failed: a provider that found a package
    # missing later says what to install itself.
    imported = str(exc).startswith("cannot import backend module")
    if dist is None or not imported or not isinstance(exc.__cause__, ModuleNotFoundError):
        return None
    if entry_point.name not in (dist.metadata.get_all("Provides-Extra") or []):
        return None
    return f"the {entry_point.name} backend needs: pip install '{dist.name}[{entry_point.name}]'"


def _load_target(target: str) -> Provider:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ProviderError(_with_known(f"{target!r} is not of the form 'package.module:attr'"))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ProviderError(
            f"cannot import backend module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    obj: Any = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ProviderError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(obj, Provider) and callable(obj):
        try:
            obj = obj()
        except ProviderError:
            raise
        except Exception as exc:
            raise ProviderError(
                f"{target} raised {type(exc).__name__} while building the provider: {exc}"
            ) from exc
    if not isinstance(obj, Provider):
        raise ProviderError(
            f"{target} is {type(obj).__name__}, not a stm_conformance.Provider "
            "(or a zero-argument callable returning one)"
        )
    return obj


def _with_known(problem: str) -> str:
    known = ", ".join(sorted(registered_backends())) or "none"
    return (
        f"{problem}; registered backends: {known}. "
        "Name a registered backend or give 'package.module:provider'."
    )
