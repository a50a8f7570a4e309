"""The provider: kit types in, PenguiFlow types out."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from stm_conformance.contract import ConversationTurn, MemoryKey, ShortTermMemoryConfig, Summarizer
from stm_conformance.provider import Provider, ProviderError

__all__ = ["PenguiFlowMemory", "provider"]


def _penguiflow() -> ModuleType:
    try:
        return importlib.import_module("penguiflow.planner.memory")
    except ImportError as exc:
        raise ProviderError(
            "the penguiflow backend needs PenguiFlow: pip install 'stm-conformance[penguiflow]'"
        ) from exc


def _config(pf: ModuleType, config: ShortTermMemoryConfig) -> Any:
    # Every field PenguiFlow has; summarizer_timeout_s has no counterpart there.
    budget = config.budget
    return pf.ShortTermMemoryConfig(
        strategy=config.strategy,
        budget=pf.MemoryBudget(
            full_zone_turns=budget.full_zone_turns,
            summary_max_tokens=budget.summary_max_tokens,
            total_max_tokens=budget.total_max_tokens,
            overflow_policy=budget.overflow_policy,
        ),
        isolation=pf.MemoryIsolation(
            tenant_key=config.isolation.tenant_key,
            user_key=config.isolation.user_key,
            session_key=config.isolation.session_key,
            require_explicit_key=config.isolation.require_explicit_key,
        ),
        summarizer_model=config.summarizer_model,
        include_trajectory_digest=config.include_trajectory_digest,
        recovery_backlog_limit=config.recovery_backlog_limit,
        retry_attempts=config.retry_attempts,
        retry_backoff_base_s=config.retry_backoff_base_s,
        degraded_retry_interval_s=config.degraded_retry_interval_s,
        token_estimator=config.token_estimator,
        on_turn_added=config.on_turn_added,
        on_summary_updated=config.on_summary_updated,
        on_health_changed=config.on_health_changed,
    )


class PenguiFlowMemory:
    """PenguiFlow's memory behind the kit's types; every other call passes straight through."""

    def __init__(self, pf: ModuleType, memory: Any) -> None:
        self._pf = pf
        self._memory = memory

    @property
    def health(self) -> Any:
        return self._memory.health

    async def add_turn(self, turn: ConversationTurn) -> None:
        pf = self._pf
        digest = turn.trajectory_digest
        await self._memory.add_turn(
            pf.ConversationTurn(
                user_message=turn.user_message,
                assistant_response=turn.assistant_response,
                trajectory_digest=None
                if digest is None
                else pf.TrajectoryDigest(
                    tools_invoked=list(digest.tools_invoked),
                    observations_summary=digest.observations_summary,
                    reasoning_summary=digest.reasoning_summary,
                    artifacts_refs=list(digest.artifacts_refs),
                ),
                artifacts_shown=dict(turn.artifacts_shown),
                artifacts_hidden_refs=list(turn.artifacts_hidden_refs),
                ts=turn.ts,
            )
        )

    async def get_llm_context(self) -> Mapping[str, Any]:
        result: Mapping[str, Any] = await self._memory.get_llm_context()
        return result

    def estimate_tokens(self) -> int:
        return int(self._memory.estimate_tokens())

    async def flush(self) -> None:
        await self._memory.flush()

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = self._memory.to_dict()
        return result

    def from_dict(self, state: Mapping[str, Any]) -> None:
        self._memory.from_dict(state)

    async def persist(self, store: Any, key: str) -> None:
        await self._memory.persist(store, key)

    async def hydrate(self, store: Any, key: str) -> None:
        await self._memory.hydrate(store, key)


async def _create(
    config: ShortTermMemoryConfig, key: MemoryKey, summarizer: Summarizer
) -> PenguiFlowMemory:
    del key  # PenguiFlow's memory does not know its key
    pf = _penguiflow()
    memory = pf.DefaultShortTermMemory(config=_config(pf, config), summarizer=summarizer)
    return PenguiFlowMemory(pf, memory)


def provider() -> Provider:
    """The provider; a :class:`ProviderError` at once when PenguiFlow is not installed.

    A factory rather than a :class:`Provider`, so that ``--stm-backend=penguiflow`` without
    PenguiFlow fails at start-up in one line instead of in every check.
    """
    pf = _penguiflow()
    return Provider(
        name="penguiflow",
        create=_create,
        capabilities=frozenset(
            {"truncation", "rolling_summary", "serialization", "persistence", "callbacks"}
        ),
        # PenguiFlow raises its own class of that name under overflow_policy="error".
        budget_exceeded_error=pf.MemoryBudgetExceeded,
    )
