"""The contract between a short-term memory backend and the conformance kit.

Plain data types and protocols only: importable without pytest, and the one place both the
kit and every backend (the reference included) take them from. Names, fields and defaults
match PenguiFlow's ``penguiflow.planner.memory``, so code written against it runs unchanged.
Validation is stricter where the original let bad input through (see ``docs/spec.md``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "MAX_KEY_COMPONENT_LENGTH",
    "OVERFLOW_POLICIES",
    "STRATEGIES",
    "ConversationTurn",
    "MemoryBudget",
    "MemoryBudgetExceeded",
    "MemoryHealth",
    "MemoryIsolation",
    "MemoryKey",
    "OverflowPolicy",
    "ShortTermMemory",
    "ShortTermMemoryArtifacts",
    "ShortTermMemoryConfig",
    "ShortTermMemoryPersistence",
    "ShortTermMemorySerializable",
    "Strategy",
    "Summarizer",
    "TokenEstimator",
    "TrajectoryDigest",
    "canonical_json",
    "default_token_estimator",
]

Strategy = Literal["truncation", "rolling_summary", "none"]
OverflowPolicy = Literal["truncate_summary", "truncate_oldest", "error"]

STRATEGIES: frozenset[str] = frozenset({"truncation", "rolling_summary", "none"})
OVERFLOW_POLICIES: frozenset[str] = frozenset({"truncate_summary", "truncate_oldest", "error"})

#: Longest accepted component of a :class:`MemoryKey`, in characters.
MAX_KEY_COMPONENT_LENGTH = 1024


class MemoryBudgetExceeded(RuntimeError):
    """Raised by ``add_turn`` when ``overflow_policy="error"`` and the turn would not fit."""


class MemoryHealth(str, Enum):  # noqa: UP042 - str() and format() as in PenguiFlow
    """Health of the summarization subsystem (spec group HLT)."""

    HEALTHY = "healthy"
    RETRY = "retry"
    DEGRADED = "degraded"
    RECOVERING = "recovering"


@dataclass(slots=True)
class TrajectoryDigest:
    """Compressed record of what the agent did to produce a turn."""

    tools_invoked: list[str]
    observations_summary: str
    reasoning_summary: str | None = None
    artifacts_refs: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ConversationTurn:
    """One user message and the assistant's answer to it.

    ``turn_id`` optionally names the turn, so that a turn saved once is recognised when it
    is offered again (a retried ``finish``, a save that wrote and then raised). It is kept
    with the turn and never rendered into a view; the spec's checks do not use it.
    """

    user_message: str
    assistant_response: str
    trajectory_digest: TrajectoryDigest | None = None

    artifacts_shown: dict[str, Any] = field(default_factory=dict)
    artifacts_hidden_refs: list[str] = field(default_factory=list)

    ts: float = 0.0
    turn_id: str | None = None


@dataclass(slots=True)
class MemoryBudget:
    """Token economy of one memory."""

    full_zone_turns: int = 5
    summary_max_tokens: int = 1000
    total_max_tokens: int = 10000
    overflow_policy: OverflowPolicy = "truncate_oldest"

    def __post_init__(self) -> None:
        for name in ("full_zone_turns", "summary_max_tokens", "total_max_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.total_max_tokens and self.summary_max_tokens > self.total_max_tokens:
            raise ValueError("summary_max_tokens must be <= total_max_tokens")
        if self.overflow_policy not in OVERFLOW_POLICIES:
            raise ValueError(
                "overflow_policy must be one of: truncate_summary, truncate_oldest, error"
            )


@dataclass(slots=True)
class MemoryIsolation:
    """Where in ``tool_context`` the parts of a :class:`MemoryKey` are found (dotted paths)."""

    tenant_key: str = "tenant_id"
    user_key: str = "user_id"
    session_key: str = "session_id"

    require_explicit_key: bool = True

    def __post_init__(self) -> None:
        for name in ("tenant_key", "user_key", "session_key"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string")


def _escape_component(value: str) -> str:
    # '%' first, so the escape character itself cannot be forged by a component.
    return value.replace("%", "%25").replace(":", "%3A")


@dataclass(slots=True, frozen=True)
class MemoryKey:
    """Scope of one memory: nothing of one key is observable through another (KEY-001)."""

    tenant_id: str
    user_id: str
    session_id: str

    def __post_init__(self) -> None:
        for name in ("tenant_id", "user_id", "session_id"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(f"MemoryKey.{name} must be a str, got {type(value).__name__}")
            if len(value) > MAX_KEY_COMPONENT_LENGTH:
                raise ValueError(
                    f"MemoryKey.{name} is {len(value)} characters; "
                    f"at most {MAX_KEY_COMPONENT_LENGTH} are accepted"
                )
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(f"MemoryKey.{name} is not encodable as UTF-8: {exc}") from None

    def composite(self) -> str:
        """Storage key ``tenant:user:session``, injective for arbitrary components (KEY-002).

        ``%`` and ``:`` inside a component are percent-escaped, so plain keys read exactly
        as PenguiFlow's while ``MemoryKey("a:b", "c", "d")`` and ``MemoryKey("a", "b:c", "d")``
        no longer collide.
        """
        return ":".join(
            _escape_component(part) for part in (self.tenant_id, self.user_id, self.session_id)
        )

    def as_dict(self) -> dict[str, str]:
        return {"tenant_id": self.tenant_id, "user_id": self.user_id, "session_id": self.session_id}


def default_token_estimator(text: str) -> int:
    """Estimate token count using a conservative character heuristic."""

    return len(text) // 4 + 1


TokenEstimator = Callable[[str], int]
Summarizer = Callable[[Any], Awaitable[Any]]


@dataclass(slots=True)
class ShortTermMemoryConfig:
    """Configuration of one memory; every field and default of PenguiFlow's, plus a timeout."""

    strategy: Strategy = "none"
    budget: MemoryBudget = field(default_factory=MemoryBudget)
    isolation: MemoryIsolation = field(default_factory=MemoryIsolation)

    summarizer_model: str | None = None
    include_trajectory_digest: bool = True

    recovery_backlog_limit: int = 20
    retry_attempts: int = 3
    retry_backoff_base_s: float = 2.0
    degraded_retry_interval_s: float = 30.0

    token_estimator: Callable[[str], int] | None = None

    on_turn_added: Callable[[ConversationTurn], Awaitable[None]] | None = None
    on_summary_updated: Callable[[str, str], Awaitable[None]] | None = None
    on_health_changed: Callable[[MemoryHealth, MemoryHealth], Awaitable[None]] | None = None

    #: A summarizer call running longer than this fails (HLT-006). ``None`` disables it.
    summarizer_timeout_s: float | None = 60.0

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError("strategy must be one of: truncation, rolling_summary, none")
        if not isinstance(self.budget, MemoryBudget):
            raise TypeError("budget must be a MemoryBudget")
        if not isinstance(self.isolation, MemoryIsolation):
            raise TypeError("isolation must be a MemoryIsolation")
        for name in ("recovery_backlog_limit", "retry_attempts"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int")
            if value < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.summarizer_model is not None:  # copied into every saved state
            if not isinstance(self.summarizer_model, str):
                raise TypeError("summarizer_model must be a str or None")
            try:
                self.summarizer_model.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("summarizer_model is not valid Unicode text") from None
        for name in ("retry_backoff_base_s", "degraded_retry_interval_s"):
            _check_seconds(name, getattr(self, name), zero=True)
        if self.summarizer_timeout_s is not None:  # None, not inf, disables it
            _check_seconds("summarizer_timeout_s", self.summarizer_timeout_s, zero=False)
        if self.token_estimator is not None and not callable(self.token_estimator):
            raise TypeError("token_estimator must be callable or None")


def _check_seconds(name: str, value: object, *, zero: bool) -> None:
    """A finite number of seconds (not a bool), at least 0 or above it: an infinite backoff
    or interval would leave a failed memory waiting for good, ``flush()`` with it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    # Written so that NaN, which compares false with everything, is refused too.
    if not (value >= 0 if zero else value > 0) or not math.isfinite(value):
        bound = ">= 0" if zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, not {value!r}")


def canonical_json(value: Any) -> str:
    """The canonical JSON of a view: what ``estimate_tokens()`` measures (BUD-008)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


# -- protocols ----------------------------------------------------------------------


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
