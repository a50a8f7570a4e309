"""Token counting and budgets of the reference memory (spec group BUD, plus WM-005/WM-006).

The property test drives random ``add_turn``/summarizer/``flush`` sequences under random small
budgets, policies, estimators and windows, and checks the budget invariants after every step.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from reference_impl import (
    ConversationTurn,
    DefaultShortTermMemory,
    LengthBasedEstimator,
    MemoryBudget,
    MemoryBudgetExceeded,
    MemoryHealth,
    ShortTermMemoryConfig,
    TrajectoryDigest,
    canonical_json,
    default_token_estimator,
)
from reference_impl.budget import Budget
from reference_impl.entries import Entry, MemoryState
from reference_impl.health import HealthMachine
from reference_impl.tokens import TokenMeter

Estimator = Callable[[str], int]
POLICIES = ["truncate_oldest", "truncate_summary", "error"]


def comma_tokens(text: str) -> int:
    """An estimator that does not depend on the text's length alone."""
    return len(text.split(",")) + 1


ESTIMATORS: dict[str, Estimator | None] = {
    "default": None,
    "length3": LengthBasedEstimator(3),
    "commas": comma_tokens,
}

EMPTY_VIEW: dict[str, Any] = {"conversation_memory": {"recent_turns": []}}


def estimator_of(estimator: Estimator | None) -> Estimator:
    return estimator or default_token_estimator


def empty_view_tokens(estimator: Estimator | None) -> int:
    return estimator_of(estimator)(canonical_json(EMPTY_VIEW))


def summary_size(estimator: Estimator | None, summary: str) -> int:
    return estimator_of(estimator)(summary) if summary else 0


def render(turn: Mapping[str, Any], include_digest: bool = True) -> dict[str, Any]:
    """A ``to_dict()`` turn as the view renders it (STR-004)."""
    rendered: dict[str, Any] = {
        "user": turn["user_message"],
        "assistant": turn["assistant_response"],
    }
    if include_digest and turn.get("trajectory_digest") is not None:
        rendered["trajectory_digest"] = dict(turn["trajectory_digest"])
    return rendered


def make_turn(
    user: str, assistant: str = "ok", digest: TrajectoryDigest | None = None
) -> ConversationTurn:
    return ConversationTurn(
        user_message=user, assistant_response=assistant, trajectory_digest=digest
    )


@dataclass
class SteppedSummarizer:
    """A summarizer whose calls finish one per ``release()`` (or at once while ``open``)."""

    summary_for: Callable[[int, list[str]], str]
    calls: list[dict[str, Any]] = field(default_factory=list)
    finished: list[tuple[list[str], str]] = field(default_factory=list)
    open: bool = False
    in_flight: int = 0
    max_in_flight: int = 0
    progress: asyncio.Event = field(default_factory=asyncio.Event)
    permits: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(0))

    async def __call__(self, payload: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls.append(dict(payload))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if not self.open:
                await self.permits.acquire()
        finally:
            self.in_flight -= 1
        users = [turn["user"] for turn in payload["turns"]]
        summary = self.summary_for(len(self.calls), users)
        self.finished.append((users, summary))
        self.progress.set()
        return {"summary": summary}

    @property
    def waiting(self) -> bool:
        return self.in_flight > 0

    async def release(self) -> None:
        """Let the call in flight (if any) finish and its result be installed."""
        if not self.waiting:
            await asyncio.sleep(0)
            return
        self.progress.clear()
        self.permits.release()
        # The worker installs the result in the step in which the call returns.
        await self.progress.wait()


# ------------------------------------------------------------------------ invariants


@dataclass
class Model:
    """What the test knows independently of the memory."""

    strategy: str
    policy: str
    estimator: Estimator | None
    full_zone_turns: int
    total: int
    summary_max: int
    include_digest: bool
    added: list[str] = field(default_factory=list)  # user messages, in add order
    seq_of: dict[str, int] = field(default_factory=dict)


async def check_invariants(
    memory: DefaultShortTermMemory, model: Model, summarizer: SteppedSummarizer
) -> None:
    estimate = estimator_of(model.estimator)
    view = await memory.get_llm_context()
    state = memory.to_dict()
    tokens = memory.estimate_tokens()

    # BUD-008: the count a caller budgets with is the count of what it sends.
    assert tokens == estimate(canonical_json(view))
    # BUD-001 (and, under "error", the invariant the policy keeps).
    if model.total:
        assert tokens <= model.total
    # BUD-003
    recent_view = view["conversation_memory"]["recent_turns"]
    assert len(recent_view) <= model.full_zone_turns
    assert len(state["turns"]) == len(recent_view)
    assert recent_view == [render(t, model.include_digest) for t in state["turns"]]
    # BUD-002
    assert summary_size(model.estimator, state["summary"]) <= model.summary_max

    for name in ("turns", "pending", "backlog"):
        for turn in state[name]:
            model.seq_of.setdefault(turn["user_message"], turn["seq"])

    if model.strategy == "truncation":
        # STR-002: the newest turns, oldest first; nothing else.
        assert state["pending"] == [] and state["backlog"] == []
        users = [t["user_message"] for t in state["turns"]]
        assert users == model.added[len(model.added) - len(users) :]
        assert set(view["conversation_memory"]) == {"recent_turns"}
        return

    pending = state["pending"]
    memory_view = view["conversation_memory"]
    visible = memory_view.get("pending_turns", [])
    assert "pending_turns" not in memory_view or visible  # present only when non-empty
    if memory.health in (MemoryHealth.DEGRADED, MemoryHealth.RECOVERING):
        assert set(memory_view) == {"recent_turns"} and pending == []
    else:
        # BUD-010: the visible pending turns are the longest newest run that fits.
        assert visible == [
            render(t, model.include_digest) for t in pending[len(pending) - len(visible) :]
        ]
        if len(visible) < len(pending):
            event("some pending turns hidden")
            assert model.policy != "error", "the error policy never hides a pending turn"
            longer = dict(memory_view)
            longer["pending_turns"] = [
                render(pending[-len(visible) - 1], model.include_digest),
                *visible,
            ]
            assert estimate(canonical_json({"conversation_memory": longer})) > model.total
        assert memory_view.get("summary", "") == state["summary"]

    # WM-005: summary, then pending, then recent; pending is older than recent.
    order = [t["seq"] for t in (*state["backlog"], *pending, *state["turns"])]
    assert order == sorted(order) and len(set(order)) == len(order)

    # WM-004: turns reach the summarizer in add order, each once per successful call. A call
    # whose summary is refused (possible only under "error") is retried with the same turns.
    through = state["summarized_through"]
    sent = [user for users, _summary in summarizer.finished for user in users]
    if model.policy != "error":
        assert len(sent) == len(set(sent))
    installed = [user for user in dict.fromkeys(sent) if model.seq_of[user] <= through]
    assert installed == sorted(installed, key=model.added.index)

    # WM-006: nothing lost; every added turn is retained or covered by an installed summary.
    retained = {t["user_message"] for name in ("turns", "pending", "backlog") for t in state[name]}
    for user in model.added:
        assert user in retained or (user in installed and model.seq_of[user] <= through), user
    assert state["dropped_turns"] == 0


# ------------------------------------------------------------------------ property test

_text = st.text(alphabet=st.sampled_from(list('ab ,é🐧"\\\n\x01')), max_size=24)
_digest = st.one_of(
    st.none(),
    st.builds(
        TrajectoryDigest,
        tools_invoked=st.lists(_text, max_size=2),
        observations_summary=_text,
        reasoning_summary=st.none() | _text,
        artifacts_refs=st.lists(_text, max_size=1),
    ),
)
_add = st.tuples(st.just("add"), _text, _text, _digest)
_ops = st.lists(
    st.one_of(_add, _add, _add, st.just(("release",)), st.just(("flush",))),
    min_size=4,
    max_size=30,
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Model, list[tuple[Any, ...]]]:
    estimator = ESTIMATORS[draw(st.sampled_from(sorted(ESTIMATORS)))]
    empty = empty_view_tokens(estimator)
    total = draw(
        st.one_of(st.just(0), st.integers(empty, empty + 40), st.integers(empty, empty + 150))
    )
    model = Model(
        strategy=draw(st.sampled_from(["truncation", "rolling_summary"])),
        policy=draw(st.sampled_from(POLICIES)),
        estimator=estimator,
        full_zone_turns=draw(st.integers(0, 4)),
        total=total,
        summary_max=draw(st.integers(0, total if total else 60)),
        include_digest=draw(st.booleans()),
    )
    return model, draw(_ops)


async def run_scenario(model: Model, ops: list[tuple[Any, ...]]) -> None:
    def summary_for(call: int, users: list[str]) -> str:
        for candidate in (f"summary {call}: " + " | ".join(users), f"s{call}", ""):
            if summary_size(model.estimator, candidate) <= model.summary_max:
                return candidate
        raise AssertionError("unreachable")

    summarizer = SteppedSummarizer(summary_for)
    config = ShortTermMemoryConfig(
        strategy=model.strategy,  # type: ignore[arg-type]
        budget=MemoryBudget(
            full_zone_turns=model.full_zone_turns,
            summary_max_tokens=model.summary_max,
            total_max_tokens=model.total,
            overflow_policy=model.policy,  # type: ignore[arg-type]
        ),
        token_estimator=model.estimator,
        include_trajectory_digest=model.include_digest,
        retry_backoff_base_s=0.001,
        degraded_retry_interval_s=0.001,
        recovery_backlog_limit=10_000,
    )
    memory = DefaultShortTermMemory(config=config, summarizer=summarizer)
    try:
        await check_invariants(memory, model, summarizer)
        for index, op in enumerate(ops):
            if op[0] == "add":
                user = f"u{index}:{op[1]}"
                before = (
                    memory.to_dict(),
                    await memory.get_llm_context(),
                    memory.estimate_tokens(),
                )
                idle = not (summarizer.waiting or before[0]["pending"] or before[0]["backlog"])
                calls = len(summarizer.calls)
                try:
                    await memory.add_turn(make_turn(user, op[2], op[3]))
                except MemoryBudgetExceeded:
                    event("add_turn refused")
                    # BUD-006: atomic; nothing changed, no summarizer call.
                    assert model.policy == "error"
                    after = (
                        memory.to_dict(),
                        await memory.get_llm_context(),
                        memory.estimate_tokens(),
                    )
                    assert after == before
                    await asyncio.sleep(0)
                    if idle:
                        assert len(summarizer.calls) == calls
                else:
                    model.added.append(user)
            elif op[0] == "release":
                await summarizer.release()
            else:
                summarizer.open = True
                while summarizer.waiting:
                    await summarizer.release()
                waiting = {t["seq"] for t in memory.to_dict()["pending"]}
                await asyncio.wait_for(memory.flush(), timeout=10)
                summarizer.open = False
                if memory.health is MemoryHealth.HEALTHY:
                    # WM-007: the turns pending when flush was called. The summary it waited
                    # for may itself push older recent turns out (the budget), which wait
                    # for a later call.
                    left = {t["seq"] for t in memory.to_dict()["pending"]}
                    assert not waiting & left
            await check_invariants(memory, model, summarizer)
        assert summarizer.max_in_flight <= 1  # WM-004
        event(f"final health: {memory.health.value}")
        if memory.to_dict()["summary"]:
            event("a summary was installed")
    finally:
        await memory.aclose()


@pytest.mark.requirement(
    "BUD-001", "BUD-002", "BUD-003", "BUD-006", "BUD-008", "BUD-010", "WM-004", "WM-005", "WM-006"
)
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenario=scenarios())
def test_budget_invariants_hold_after_every_operation(
    scenario: tuple[Model, list[tuple[Any, ...]]],
) -> None:
    model, ops = scenario
    asyncio.run(run_scenario(model, ops))


# ------------------------------------------------------------------------ construction


@pytest.mark.requirement("BUD-009")
@pytest.mark.parametrize("strategy", ["truncation", "rolling_summary"])
@pytest.mark.parametrize("estimator_name", sorted(ESTIMATORS))
def test_budget_below_the_empty_view_is_rejected_at_construction(
    strategy: str, estimator_name: str
) -> None:
    estimator = ESTIMATORS[estimator_name]
    smallest = empty_view_tokens(estimator)

    async def never(payload: Any) -> Any:
        raise AssertionError("not called")

    def build(total: int) -> DefaultShortTermMemory:
        config = ShortTermMemoryConfig(
            strategy=strategy,  # type: ignore[arg-type]
            budget=MemoryBudget(summary_max_tokens=0, total_max_tokens=total),
            token_estimator=estimator,
        )
        return DefaultShortTermMemory(config=config, summarizer=never)

    with pytest.raises(ValueError, match="total_max_tokens"):
        build(smallest - 1)
    assert build(smallest).estimate_tokens() == smallest
    assert build(0).estimate_tokens() == smallest  # 0 means no limit


# ------------------------------------------------------------------------ tiny budgets


async def _ok_summarizer(payload: Mapping[str, Any]) -> Mapping[str, Any]:
    return {"summary": ""}


def tiny_memory(strategy: str, policy: str, **kwargs: Any) -> DefaultShortTermMemory:
    summarizer = kwargs.pop("summarizer", _ok_summarizer)
    config = ShortTermMemoryConfig(
        strategy=strategy,  # type: ignore[arg-type]
        budget=MemoryBudget(
            full_zone_turns=3,
            summary_max_tokens=0,
            total_max_tokens=empty_view_tokens(None),
            overflow_policy=policy,  # type: ignore[arg-type]
        ),
        **kwargs,
    )
    return DefaultShortTermMemory(config=config, summarizer=summarizer)


@pytest.mark.anyio
@pytest.mark.requirement("BUD-001", "BUD-004", "BUD-005", "STR-002")
@pytest.mark.parametrize("policy", ["truncate_oldest", "truncate_summary"])
async def test_tiny_budget_truncation_keeps_the_empty_view(policy: str) -> None:
    memory = tiny_memory("truncation", policy)
    for index in range(4):
        await memory.add_turn(make_turn(f"u{index}"))
        assert await memory.get_llm_context() == EMPTY_VIEW
        assert memory.estimate_tokens() <= memory.config.budget.total_max_tokens
    assert memory.to_dict()["turns"] == []
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("BUD-001", "BUD-004", "BUD-005", "WM-006")
@pytest.mark.parametrize("policy", ["truncate_oldest", "truncate_summary"])
async def test_tiny_budget_rolling_summary_hides_but_keeps_every_turn(policy: str) -> None:
    gate = asyncio.Event()
    sent: list[str] = []

    async def blocked(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        await gate.wait()
        sent.extend(turn["user"] for turn in payload["turns"])
        return {"summary": ""}

    memory = tiny_memory("rolling_summary", policy, summarizer=blocked)
    for index in range(4):
        await memory.add_turn(make_turn(f"u{index}"))
        assert await memory.get_llm_context() == EMPTY_VIEW
    state = memory.to_dict()
    # Every turn was evicted from recent to pending, and hidden from the view, never deleted.
    assert [t["user_message"] for t in state["pending"]] == ["u0", "u1", "u2", "u3"]
    gate.set()
    await asyncio.wait_for(memory.flush(), timeout=5)
    assert sent == ["u0", "u1", "u2", "u3"]
    assert memory.to_dict()["pending"] == []
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("BUD-006", "BUD-009")
@pytest.mark.parametrize("strategy", ["truncation", "rolling_summary"])
async def test_tiny_budget_error_policy_refuses_every_turn(strategy: str) -> None:
    added: list[ConversationTurn] = []

    async def on_turn_added(turn: ConversationTurn) -> None:
        added.append(turn)

    memory = tiny_memory(strategy, "error", on_turn_added=on_turn_added)
    before = memory.to_dict()
    for index in range(3):
        with pytest.raises(MemoryBudgetExceeded):
            await memory.add_turn(make_turn(f"u{index}"))
    await asyncio.sleep(0)
    assert memory.to_dict() == before
    assert await memory.get_llm_context() == EMPTY_VIEW
    assert added == []
    await memory.aclose()


# ------------------------------------------------------------------------ policies


def view_tokens(
    summary: str, pending: list[ConversationTurn], recent: list[ConversationTurn]
) -> int:
    def rendered(turns: list[ConversationTurn]) -> list[dict[str, str]]:
        return [{"user": t.user_message, "assistant": t.assistant_response} for t in turns]

    view: dict[str, Any] = {"recent_turns": rendered(recent)}
    if pending:
        view["pending_turns"] = rendered(pending)
    if summary:
        view["summary"] = summary
    return default_token_estimator(canonical_json({"conversation_memory": view}))


LONG_SUMMARY = "".join(f"fact {index:03d}; " for index in range(20))  # 200 characters, 51 tokens
TURNS = [make_turn(f"question {index} " + "q" * 60, "answer " + "a" * 20) for index in range(4)]


async def memory_with_summary(policy: str) -> DefaultShortTermMemory:
    """fz=2, summary installed over TURNS[0]; budget fits summary + 2 recent + a few tokens."""

    calls = 0

    async def summarize(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        nonlocal calls
        calls += 1
        if calls > 1:  # later calls never answer: turns evicted from now on stay pending
            await asyncio.Event().wait()
        return {"summary": LONG_SUMMARY}

    total = view_tokens(LONG_SUMMARY, [], TURNS[1:3]) + 5
    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(
            full_zone_turns=2,
            summary_max_tokens=60,
            total_max_tokens=total,
            overflow_policy=policy,  # type: ignore[arg-type]
        ),
    )
    memory = DefaultShortTermMemory(config=config, summarizer=summarize)
    for turn in TURNS[:3]:
        await memory.add_turn(turn)
    await asyncio.wait_for(memory.flush(), timeout=5)
    assert (await memory.get_llm_context())["conversation_memory"]["summary"] == LONG_SUMMARY
    return memory


@pytest.mark.anyio
@pytest.mark.requirement("BUD-004", "BUD-010")
async def test_truncate_oldest_hides_pending_before_touching_recent_or_summary() -> None:
    memory = await memory_with_summary("truncate_oldest")
    await memory.add_turn(TURNS[3])  # evicts TURNS[1] to pending; over budget
    view = (await memory.get_llm_context())["conversation_memory"]
    assert "pending_turns" not in view  # hidden ...
    assert [t["user_message"] for t in memory.to_dict()["pending"]] == [TURNS[1].user_message]
    assert view["summary"] == LONG_SUMMARY  # ... rather than shortening the summary
    assert [t["user"] for t in view["recent_turns"]] == [t.user_message for t in TURNS[2:]]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("BUD-005")
async def test_truncate_summary_shortens_the_summary_first_keeping_its_newest_text() -> None:
    memory = await memory_with_summary("truncate_summary")
    await memory.add_turn(TURNS[3])
    view = (await memory.get_llm_context())["conversation_memory"]
    assert [t["user"] for t in view["pending_turns"]] == [TURNS[1].user_message]
    assert [t["user"] for t in view["recent_turns"]] == [t.user_message for t in TURNS[2:]]
    summary = view["summary"]
    assert 0 < len(summary) < len(LONG_SUMMARY) and LONG_SUMMARY.endswith(summary)
    assert memory.estimate_tokens() <= memory.config.budget.total_max_tokens
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("BUD-004")
async def test_truncate_oldest_evicts_recent_then_shortens_summary_as_a_last_resort() -> None:
    memory = await memory_with_summary("truncate_oldest")
    huge = make_turn("h" * 400)
    await memory.add_turn(huge)  # alone, it does not fit next to the summary
    view = (await memory.get_llm_context())["conversation_memory"]
    assert view["recent_turns"] == []
    assert "pending_turns" not in view
    assert LONG_SUMMARY.endswith(view.get("summary", ""))
    pending = [t["user_message"] for t in memory.to_dict()["pending"]]
    assert pending == [TURNS[1].user_message, TURNS[2].user_message, huge.user_message]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("BUD-006")
async def test_error_policy_add_turn_is_atomic() -> None:
    calls: list[Any] = []
    added: list[str] = []

    async def summarize(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        calls.append(payload)
        return {"summary": "s"}

    async def on_turn_added(turn: ConversationTurn) -> None:
        added.append(turn.user_message)

    small = [make_turn("a"), make_turn("b")]
    total = view_tokens("", [], small)
    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(
            full_zone_turns=2, summary_max_tokens=5, total_max_tokens=total, overflow_policy="error"
        ),
        on_turn_added=on_turn_added,
    )
    memory = DefaultShortTermMemory(config=config, summarizer=summarize)
    for turn in small:
        await memory.add_turn(turn)
    before = (
        memory.to_dict(),
        await memory.get_llm_context(),
        memory.estimate_tokens(),
        memory.health,
    )
    with pytest.raises(MemoryBudgetExceeded):
        await memory.add_turn(make_turn("this one does not fit"))  # would also evict "a"
    for _ in range(5):
        await asyncio.sleep(0)
    after = (
        memory.to_dict(),
        await memory.get_llm_context(),
        memory.estimate_tokens(),
        memory.health,
    )
    assert after == before
    assert calls == []  # no summarizer call for the refused eviction
    assert added == ["a", "b"]  # no callback for the refused turn
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("BUD-007", "BUD-002", "HLT-007")
async def test_oversize_summary_is_a_summarizer_failure() -> None:
    async def verbose(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"summary": "x" * 400}  # 101 tokens

    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=1, summary_max_tokens=100),
        retry_attempts=0,
        degraded_retry_interval_s=3600,
    )
    memory = DefaultShortTermMemory(config=config, summarizer=verbose)
    await memory.add_turn(make_turn("u0"))
    await memory.add_turn(make_turn("u1"))
    await asyncio.wait_for(memory.flush(), timeout=5)  # never raises
    assert memory.health is MemoryHealth.DEGRADED
    assert memory.to_dict()["summary"] == ""
    assert [t["user_message"] for t in memory.to_dict()["backlog"]] == ["u0"]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("BUD-007", "BUD-006")
async def test_error_policy_summary_that_would_overflow_the_view_is_a_failure() -> None:
    summary = "s" * 80  # 21 tokens, within summary_max_tokens

    async def summarize(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"summary": summary}

    turns = [make_turn("a"), make_turn("b")]
    total = view_tokens("", turns[:1], turns[1:])  # fits the pending turn, not the summary
    assert view_tokens(summary, [], turns[1:]) > total
    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(
            full_zone_turns=1,
            summary_max_tokens=total,
            total_max_tokens=total,
            overflow_policy="error",
        ),
        retry_attempts=0,
        degraded_retry_interval_s=3600,
    )
    memory = DefaultShortTermMemory(config=config, summarizer=summarize)
    for turn in turns:
        await memory.add_turn(turn)
    await asyncio.wait_for(memory.flush(), timeout=5)
    assert memory.health is MemoryHealth.DEGRADED
    assert memory.to_dict()["summary"] == ""
    assert memory.estimate_tokens() <= total
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("BUD-008")
@pytest.mark.parametrize("estimator_name", sorted(ESTIMATORS))
async def test_estimate_tokens_counts_the_canonical_view_with_summary_and_digests(
    estimator_name: str,
) -> None:
    estimator = ESTIMATORS[estimator_name]

    calls = 0

    async def summarize(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        nonlocal calls
        calls += 1
        if calls > 1:  # later calls never answer: turns evicted from now on stay pending
            await asyncio.Event().wait()
        return {"summary": 'Zoë said "hi", then\nleft ✓'}

    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=1, total_max_tokens=0),
        token_estimator=estimator,
    )
    memory = DefaultShortTermMemory(config=config, summarizer=summarize)
    digest = TrajectoryDigest(["search", "日本"], "obs, with comma", None, ["artifact://x"])
    await memory.add_turn(make_turn("first, ✓", "ans\\wer", digest))
    await memory.add_turn(make_turn("second", "ans"))
    await asyncio.wait_for(memory.flush(), timeout=5)
    await memory.add_turn(make_turn("third", "ans"))  # "second" becomes pending
    view = await memory.get_llm_context()
    assert set(view["conversation_memory"]) == {"summary", "pending_turns", "recent_turns"}
    assert memory.estimate_tokens() == estimator_of(estimator)(canonical_json(view))
    await memory.aclose()


def _held(memory: DefaultShortTermMemory) -> list[Entry]:
    state = memory._state
    return [*state.recent, *state.pending, *state.backlog]


@pytest.mark.anyio
@pytest.mark.requirement("BUD-008")
async def test_a_memory_without_a_limit_measures_its_turns_from_the_first_estimate() -> None:
    """With no limit and a length-based estimator, ``add_turn`` leaves turns unmeasured
    until ``estimate_tokens`` first asks; that call measures every held turn -- recent,
    pending, hidden, in the degraded backlog -- and later turns are measured as added."""
    failing = [True]
    healthy = asyncio.Event()

    async def on_health_changed(old: MemoryHealth, new: MemoryHealth) -> None:
        if new is MemoryHealth.HEALTHY:
            healthy.set()

    async def summarize(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        if failing[0]:
            raise RuntimeError("down")
        return {"summary": "Zoë, ✓ " + str(len(payload["turns"]))}

    config = ShortTermMemoryConfig(
        strategy="rolling_summary",
        budget=MemoryBudget(full_zone_turns=2, total_max_tokens=0),
        retry_attempts=0,
        degraded_retry_interval_s=0.02,
        on_health_changed=on_health_changed,
    )
    memory = DefaultShortTermMemory(config=config, summarizer=summarize)
    digest = TrajectoryDigest(["search", "日本"], 'obs "quoted"', None, ["artifact://x"])
    for i in range(3):
        await memory.add_turn(make_turn(f"q{i} ünï \U0001f600", "a\n\\b", digest))
    for _ in range(20):
        await asyncio.sleep(0)
    assert memory.health is not MemoryHealth.HEALTHY
    for i in range(4):  # evicted while degraded: into the backlog, unmeasured
        await memory.add_turn(make_turn(f"later {i}", ""))
    assert memory._state.backlog and not memory._state.metered
    assert all(e.fragment == "" and e.size == 0 for e in _held(memory))

    view = await memory.get_llm_context()
    assert memory.estimate_tokens() == default_token_estimator(canonical_json(view))
    assert memory._state.metered
    assert all(e.fragment == canonical_json(e.rendered) for e in _held(memory))

    # Recovery moves the measured backlog back into the view's running sums.
    failing[0] = False
    await asyncio.wait_for(healthy.wait(), timeout=5)
    await memory.add_turn(make_turn("last", "é"))
    view = await memory.get_llm_context()
    assert memory.health is MemoryHealth.HEALTHY
    assert memory.estimate_tokens() == default_token_estimator(canonical_json(view))
    assert all(e.size == len(e.fragment) > 0 for e in _held(memory))
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("estimator_name", "limit"), [("default", 10_000), ("commas", 0), ("length3", 0)]
)
async def test_which_memories_measure_every_turn_as_it_is_added(
    estimator_name: str, limit: int
) -> None:
    """A limit, or an estimator that reads the text, measures each turn in ``add_turn``
    (catching up later would hold the loop); a length-based one without a limit defers."""
    config = ShortTermMemoryConfig(
        strategy="truncation",
        budget=MemoryBudget(full_zone_turns=3, total_max_tokens=limit),
        token_estimator=ESTIMATORS[estimator_name],
    )
    memory = DefaultShortTermMemory(config=config)
    await memory.add_turn(make_turn("q", "a"))
    deferred = estimator_name == "length3"
    assert memory._state.metered is not deferred
    assert [e.fragment == "" for e in _held(memory)] == [deferred]
    await memory.aclose()


def _words(text: str) -> int:
    """An estimator that measures the text (as tiktoken does), not only its length."""
    return len(re.findall(r"\w+|[^\w\s]", text))


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=80),
    limit=st.integers(60, 400),
    visible_from=st.integers(0, 60),
)
def test_hiding_pending_turns_in_bulk_hides_what_one_at_a_time_would(
    sizes: list[int], limit: int, visible_from: int
) -> None:
    """BUD-004: the search that hides many pending turns at once (settle, from_dict) ends
    where hiding the oldest visible turn one at a time ends, for an estimator that reads
    the text."""
    _check_bulk_hide(sizes, limit, visible_from)


def test_hiding_pending_turns_in_bulk_at_every_limit() -> None:
    """The same, at every limit where the answer changes, so over every answer from none
    to all of 120 pending turns hidden. Hiding one at a time stops at the first visible
    run whose view fits: measured once per run here (the view does not depend on the
    limit), not once per run and limit."""
    sizes = [(7 * i) % 13 for i in range(120)]
    state = _pending_state(sizes, 0)
    measure = _bulk_budget(10**9)
    tokens = []  # the view's tokens with pending[v:] visible, for v = 0 .. all hidden
    for visible_from in range(len(sizes) + 1):
        run = state.copy()
        run.show_pending_from(visible_from)
        tokens.append(measure.tokens(run))
    answers = set()
    # Each run's own count and one less: the limits where the answer moves.
    limits = sorted({t + d for t in tokens for d in (0, -1)} - set(range(tokens[-1])))
    for limit in limits:
        budget = _bulk_budget(limit)
        expected = next((v for v, t in enumerate(tokens) if t <= limit), len(sizes))
        answers.add(expected)
        searched = state.copy()
        if expected == 0:
            continue  # nothing to hide: enforce would not search
        budget._hide_pending(searched)
        assert searched.visible_from == expected, limit
        assert searched.visible_size == sum(e.size for e in searched.visible_pending)
    assert answers == set(range(len(sizes) + 1))  # every answer, from none to all hidden


def _bulk_budget(limit: int) -> Budget:
    return Budget.for_config(
        ShortTermMemoryConfig(
            strategy="rolling_summary",
            budget=MemoryBudget(
                full_zone_turns=1, summary_max_tokens=min(50, limit), total_max_tokens=limit
            ),
            token_estimator=_words,
        )
    )


def _pending_state(sizes: list[int], visible_from: int) -> MemoryState:
    state = MemoryState(health=HealthMachine(2, 0.1, 1.0))
    for seq, size in enumerate(sizes, start=1):
        state.push_pending(
            Entry.make(seq, ConversationTurn("w " * size, "é"), include_digest=False, size_of=len)
        )
    state.show_pending_from(min(visible_from, len(sizes)))
    state.set_summary("an older summary")
    return state


def _check_bulk_hide(sizes: list[int], limit: int, visible_from: int) -> None:
    budget = _bulk_budget(limit)
    state = _pending_state(sizes, visible_from)
    one_by_one = state.copy()
    while not budget.fits(one_by_one) and one_by_one.visible_from < len(one_by_one.pending):
        one_by_one.hide_oldest_visible()
    if one_by_one.visible_from == state.visible_from:
        return  # nothing to hide: enforce would not search
    budget._hide_pending(state)
    assert state.visible_from == one_by_one.visible_from
    assert state.visible_size == sum(e.size for e in state.visible_pending)


@pytest.mark.parametrize("bad", [math.nan, -1, 2.5, True, "3", None])
def test_an_estimate_that_is_no_count_of_tokens_is_refused(bad: object) -> None:
    """NaN fits nothing and exceeds nothing: a budget judged with it would evict every
    turn without a word. What is no int >= 0 is a TypeError naming the estimator."""

    def estimator(text: str) -> Any:
        return bad if len(text) > 10 else 1

    meter = TokenMeter.for_estimator(estimator)
    assert meter.text_size("short") == 1
    with pytest.raises(TypeError, match="token_estimator returned"):
        meter.text_size("a longer text")
