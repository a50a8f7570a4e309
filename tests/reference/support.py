"""Helpers shared by the reference memory's tests (``from support import ...``).

``tests/reference`` is not a package: pytest's default ``prepend`` import mode puts this
directory on ``sys.path`` when it imports a test module, so this module imports as ``support``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from reference_impl import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    MemoryHealth,
    ShortTermMemoryConfig,
)

HEALTHY, RETRY, DEGRADED, RECOVERING = (
    MemoryHealth.HEALTHY,
    MemoryHealth.RETRY,
    MemoryHealth.DEGRADED,
    MemoryHealth.RECOVERING,
)

WAIT_S = 5.0


def make_turn(index: int, **extra: Any) -> ConversationTurn:
    return ConversationTurn(user_message=f"u{index}", assistant_response=f"a{index}", **extra)


def rolling_config(
    *,
    degraded_retry_interval_s: float,
    full_zone_turns: int = 1,
    retry_backoff_base_s: float = 0.001,
    **kwargs: Any,
) -> ShortTermMemoryConfig:
    """A ``rolling_summary`` config with no token budget and a fast first retry.

    Each test module states its own ``degraded_retry_interval_s``: some watch degraded retries
    happen, others need them to stay away.
    """
    return ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=full_zone_turns, total_max_tokens=0),
        retry_backoff_base_s=retry_backoff_base_s,
        degraded_retry_interval_s=degraded_retry_interval_s,
        **kwargs,
    )


def users(turns: Any, key: str = "user") -> list[str]:
    return [turn[key] for turn in turns]


async def until(predicate: Callable[[], bool]) -> None:
    """Poll until ``predicate()`` holds; fail after ``WAIT_S`` seconds."""
    with anyio.fail_after(WAIT_S):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.001)


def install_loop_error_recorder() -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
    return errors


async def blocked_summarizer(payload: Mapping[str, Any]) -> Mapping[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def view_of(memory: DefaultShortTermMemory) -> dict[str, Any]:
    return dict((await memory.get_llm_context())["conversation_memory"])
