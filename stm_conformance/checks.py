"""Helpers shared by the conformance checks: turns, configs, views, waiting.

Backend authors may reuse them in checks of their own. Everything here reads memories only
through the protocol and JSON-level outputs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, NoReturn

import anyio
import pytest
from _pytest.outcomes import OutcomeException

from ._deadline import NOT_CONCLUDED, Allowance, CheckOutOfTime, stalled_s, wait_scheduled
from ._patience import patient
from .contract import (
    ConversationTurn,
    MemoryBudget,
    OverflowPolicy,
    ShortTermMemoryConfig,
    TrajectoryDigest,
    canonical_json,
    default_token_estimator,
)
from .model import render_turn

__all__ = [
    "EITHER_STRATEGY",
    "HIDING_BUDGET",
    "SHORTENING_BUDGET",
    "OneSummary",
    "assert_not_late",
    "canonical_json",
    "concurrently",
    "config",
    "dropped_while_not_degraded",
    "eventually",
    "hide_every_pending_turn",
    "install_one_summary_to_shorten",
    "json_state",
    "memory_view",
    "not_concluded",
    "patient",
    "returns_within",
    "state_text",
    "summary_or_failure",
    "turn",
    "turn_json",
    "users",
    "view_tokens",
]

#: ``@pytest.mark.parametrize("strategy", EITHER_STRATEGY)``: a check run once per strategy
#: that keeps turns, each run skipped unless the backend declares that capability.
EITHER_STRATEGY = [
    pytest.param(name, marks=pytest.mark.stm_capability(name))
    for name in ("truncation", "rolling_summary")
]


def turn(i: int, *, pad: int = 0, digest: bool = False) -> ConversationTurn:
    """Turn number ``i``: user text ``u<i>``, assistant ``a<i>``, ``pad`` extra characters."""
    return ConversationTurn(
        user_message=f"u{i}" + "x" * pad,
        assistant_response=f"a{i}",
        trajectory_digest=TrajectoryDigest(
            tools_invoked=[f"tool{i}"], observations_summary=f"obs{i}", reasoning_summary=None
        )
        if digest
        else None,
    )


def state_text(memory: Any) -> str:
    """``memory.to_dict()`` as JSON text with sorted keys, for comparing states; SER-001
    when it is not JSON data, whatever check asks."""
    state = memory.to_dict()
    try:
        return json.dumps(state, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise AssertionError(f"SER-001: to_dict() is not JSON data: {exc}") from exc


def json_state(memory: Any) -> dict[str, Any]:
    """``memory.to_dict()`` through JSON, as a store would hand it back (SER-001 when it is
    not JSON data)."""
    loaded: dict[str, Any] = json.loads(state_text(memory))
    return loaded


def dropped_while_not_degraded(memory: Any) -> str | None:
    """A WM-006 finding when ``memory`` counts dropped turns while neither DEGRADED nor
    RECOVERING (turns discarded that no summary covers, with no backlog to overflow);
    else ``None``. For checks that lose turns to a small ``recovery_backlog_limit`` on
    purpose, after degrading: a backend that applies the limit sooner is told so."""
    health = memory.health.value
    dropped = memory.to_dict().get("dropped_turns")
    if health in ("healthy", "retry") and dropped:
        return (
            f"WM-006: {dropped} turns dropped while {health.upper()}: the backlog limit bounds "
            "only the DEGRADED backlog"
        )
    return None


def turn_json(t: ConversationTurn, *, include_digest: bool = True) -> dict[str, Any]:
    """How the spec renders a turn (STR-004); the kit's model states it, not a backend."""
    return render_turn(t, include_digest=include_digest)


def config(
    strategy: str = "rolling_summary",
    *,
    full_zone_turns: int = 2,
    summary_max_tokens: int = 1000,
    total_max_tokens: int = 10000,
    overflow_policy: OverflowPolicy = "truncate_oldest",
    retry_attempts: int = 2,
    retry_backoff_base_s: float = 0.001,
    degraded_retry_interval_s: float = 60.0,
    recovery_backlog_limit: int = 20,
    summarizer_timeout_s: float | None = 2.0,
    **extra: Any,
) -> ShortTermMemoryConfig:
    """A config with tiny timings, so checks never sleep for long."""
    return ShortTermMemoryConfig(
        strategy=strategy,  # type: ignore[arg-type]
        budget=MemoryBudget(
            full_zone_turns=full_zone_turns,
            summary_max_tokens=summary_max_tokens,
            total_max_tokens=total_max_tokens,
            overflow_policy=overflow_policy,
        ),
        retry_attempts=retry_attempts,
        retry_backoff_base_s=retry_backoff_base_s,
        degraded_retry_interval_s=degraded_retry_interval_s,
        recovery_backlog_limit=recovery_backlog_limit,
        summarizer_timeout_s=summarizer_timeout_s,
        **extra,
    )


#: ``config`` options under which :func:`hide_every_pending_turn` leaves its pending turns
#: out of the view: a window of 1 and a budget the newest turn nearly fills.
HIDING_BUDGET: dict[str, int] = {
    "full_zone_turns": 1,
    "total_max_tokens": 70,
    "summary_max_tokens": 20,
}


async def hide_every_pending_turn(memory: Any) -> None:
    """Add u0 and u1, evicted to pending, then u2, so long that recent leaves the budget
    (:data:`HIDING_BUDGET`) no room to show them: pending, and all hidden (BUD-004)."""
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    last = turn(2, pad=180)
    await memory.add_turn(last)
    recent = users((await memory_view(memory)).get("recent_turns"))
    if recent != [last.user_message]:
        cfg = getattr(memory, "_stm_config", None)
        summary_first = (
            isinstance(cfg, ShortTermMemoryConfig)
            and cfg.budget.overflow_policy == "truncate_summary"
        )
        raise AssertionError(
            f"{'BUD-005' if summary_first else 'BUD-004'}: recent holds {len(recent)} turns "
            f"after u2, not u2 alone, which fits: "
            "pending turns are hidden before a recent turn is evicted (precondition)"
        )


#: ``config`` options under which :func:`install_one_summary_to_shorten`'s summary, within
#: ``summary_max_tokens``, leaves no room for three more long turns: ``truncate_summary``
#: must shorten it (BUD-005).
SHORTENING_BUDGET: dict[str, Any] = {
    "full_zone_turns": 2,
    "summary_max_tokens": 120,
    "total_max_tokens": 200,
    "overflow_policy": "truncate_summary",
}


class OneSummary:
    """A summarizer whose first call returns ``text`` (400 characters, about 100 tokens)
    and whose later calls wait for :meth:`release`: once the first summary is in, what
    changes it is the budget alone."""

    def __init__(self) -> None:
        self.text = "".join(f"fact {i}. " for i in range(50))[:400]
        self.calls = 0
        self._released = asyncio.Event()

    async def __call__(self, payload: Any) -> dict[str, str]:
        self.calls += 1
        if self.calls > 1:
            await self._released.wait()
        return {"summary": self.text}

    def release(self) -> None:
        self._released.set()


async def install_one_summary_to_shorten(memory: Any) -> dict[str, Any]:
    """Add three long turns to ``memory`` (made with :data:`SHORTENING_BUDGET` and a
    :class:`OneSummary`) and flush: the first summary is installed. Returns the view; each
    long turn added from then on (``turn(i, pad=100)``) needs the summary shortened."""
    for i in range(3):
        await memory.add_turn(turn(i, pad=100))
    await returns_within(memory.flush(), what="WM-007: flush() of the first summary")
    view = await memory_view(memory)
    if not view.get("summary"):
        raise AssertionError("WM-007: flush() returned with no summary installed (precondition)")
    return view


def view_tokens(config: ShortTermMemoryConfig, context: Mapping[str, Any]) -> int:
    """The tokens the spec counts in ``context`` (a ``get_llm_context()``) under
    ``config``: its ``token_estimator``, or the default one, on the canonical JSON
    (BUD-008)."""
    return (config.token_estimator or default_token_estimator)(canonical_json(context))


async def memory_view(memory: Any) -> dict[str, Any]:
    """The ``conversation_memory`` part of the view (``{}`` when absent).

    For a memory from ``make_memory`` (which knows its configuration), the view must first
    keep the window (BUD-003) and, under a truncate policy, the token limit (BUD-001): a
    check built on a view that breaks them blames those requirements, not its own.
    """
    ctx = dict(await memory.get_llm_context())
    inner = dict(ctx.get("conversation_memory", {}))
    cfg = getattr(memory, "_stm_config", None)
    if isinstance(cfg, ShortTermMemoryConfig) and cfg.strategy != "none":
        window = cfg.budget.full_zone_turns
        recent = inner.get("recent_turns") or []
        if len(recent) > window:
            raise AssertionError(
                f"BUD-003: the view holds {len(recent)} recent turns, full_zone_turns={window}"
            )
        limit = cfg.budget.total_max_tokens
        if limit and cfg.budget.overflow_policy != "error":
            tokens = view_tokens(cfg, ctx)
            if tokens > limit:
                raise AssertionError(
                    f"BUD-001: the view has {tokens} tokens, total_max_tokens={limit}"
                )
    return inner


def users(turns: Any) -> list[str]:
    """The ``user`` texts of rendered turns, for compact comparisons."""
    return [t["user"] for t in turns or []]


async def eventually(
    predicate: Callable[[], Awaitable[bool] | bool],
    *,
    timeout: float = 5.0,  # noqa: ASYNC109 - a polling deadline with its own message
    what: str,
) -> None:
    """Poll ``predicate`` until true; fail with ``what`` after ``timeout`` seconds (scaled
    by ``--stm-patience``) of time the process was scheduled (a stall of the whole process
    meanwhile, noted by the watchdog, is added)."""
    timeout = patient(timeout)
    allowance = Allowance(timeout)
    while True:
        result = predicate()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if allowance.left() <= 0:
            # ``what`` leads, so a message naming a requirement ID is attributed to it.
            raise AssertionError(f"{what} (still not true after {timeout:g}s)")
        await asyncio.sleep(0.002)


async def concurrently(*calls: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    """Run ``calls`` at once in a task group, waiting for all of them.

    A pytest outcome one of them raises (a broken precondition from the checked memory,
    which ends the check at once) ends the check as itself: inside the group it would
    leave as a ``BaseExceptionGroup``, which closes the test runner's event loop thread
    and fails every async check after this one."""
    try:
        async with anyio.create_task_group() as group:
            for call in calls:
                group.start_soon(call)
    except BaseExceptionGroup as raised:
        outcome = _first_outcome(raised)
        if outcome is None:
            raise
        raise outcome from None  # its own traceback shows the call it came from


def _first_outcome(group: BaseExceptionGroup[Any]) -> BaseException | None:
    for inner in group.exceptions:
        if isinstance(inner, BaseExceptionGroup):
            found = _first_outcome(inner)
            if found is not None:
                return found
        elif isinstance(inner, OutcomeException):
            return inner
    return None


def not_concluded(why: str) -> NoReturn:
    """End the check judging no requirement: the check itself was not scheduled in time to
    see what it needed (a busy machine), and what the backend did was right as far as it
    was seen. The run still fails; the report blames nothing (see :class:`CheckOutOfTime`)."""
    raise CheckOutOfTime(f"{NOT_CONCLUDED}: {why}")


def assert_not_late(late_s: float, since: float, until: float, what: str) -> None:
    """Fail with ``what`` when the backend did something ``late_s`` seconds after its
    bound allows (nothing when ``late_s`` is not positive); but when the whole process was
    not scheduled for that long between ``since`` and ``until`` (``time.monotonic()``), no
    backend could have kept the bound: the check is not concluded (a busy machine)."""
    if late_s <= 0:
        return
    time.sleep(0.1)  # let the watchdog note a stall that ended just now (two of its polls)
    stalled = stalled_s(since, until)
    if stalled >= late_s:
        not_concluded(
            f"{what}: {late_s:.3f}s past its bound, while the process was not scheduled at "
            f"all for {stalled:.3f}s of that time (a busy machine, not the backend)"
        )
    raise AssertionError(what)


async def returns_within(
    awaitable: Awaitable[Any],
    *,
    timeout: float = 4.0,  # noqa: ASYNC109 - a bounded wait with its own message
    what: str,
) -> Any:
    """Await ``awaitable``; fail with ``what`` if it takes over ``timeout`` seconds (scaled
    by ``--stm-patience``, of time the process was scheduled). For waits the checked memory
    cannot diagnose itself (a check's own summarizer), so that they fail on their
    requirement, not at the check's deadline."""
    timeout = patient(timeout)
    task = asyncio.ensure_future(awaitable)
    if not await wait_scheduled(task, timeout):
        task.cancel()
        raise AssertionError(f"{what} (did not return within {timeout:g}s)")
    return task.result()


async def summary_or_failure(memory: Any, *, timeout: float = 5.0) -> dict[str, Any]:  # noqa: ASYNC109
    """The view once a summary is installed or the memory leaves HEALTHY, or after
    ``timeout`` seconds (scaled by ``--stm-patience``): how a first call ended, for checks
    that then say which outcome was right."""
    deadline = time.monotonic() + patient(timeout)
    view = await memory_view(memory)
    while not view.get("summary") and str(memory.health.value) == "healthy":
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.01)
        view = await memory_view(memory)
    return view
