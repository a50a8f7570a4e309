"""BUD — token budgets and the three overflow policies."""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import pytest

from stm_conformance import ScriptedSummarizer
from stm_conformance.checks import (
    EITHER_STRATEGY,
    SHORTENING_BUDGET,
    OneSummary,
    canonical_json,
    config,
    eventually,
    install_one_summary_to_shorten,
    json_state,
    memory_view,
    returns_within,
    state_text,
    summary_or_failure,
    turn,
    turn_json,
    users,
    view_tokens,
)
from stm_conformance.contract import (
    ConversationTurn,
    MemoryKey,
    TrajectoryDigest,
    default_token_estimator,
)
from stm_conformance.fixtures import PreconditionError
from stm_conformance.model import SpecModel

req = pytest.mark.stm_requirement
cap = pytest.mark.stm_capability
scenario = pytest.mark.stm_scenario

TRUNCATE = ["truncate_oldest", "truncate_summary"]


def _words(text: str) -> int:
    # Not a function of length alone: backends cannot shortcut it.
    return len(text.replace(",", " ").split()) + 1


def _truncation(total: int, policy: str) -> Any:
    """A ``truncation`` memory of 4 recent turns under ``total_max_tokens=total``."""
    return config(
        "truncation",
        full_zone_turns=4,
        total_max_tokens=total,
        summary_max_tokens=10,
        overflow_policy=policy,  # type: ignore[arg-type]
    )


async def _check_invariants(memory: Any, cfg: Any, estimator: Any = None) -> dict[str, Any]:
    ctx = dict(await memory.get_llm_context())
    estimator = estimator or default_token_estimator
    tokens = memory.estimate_tokens()
    assert tokens == estimator(canonical_json(ctx)), (
        f"BUD-008: estimate_tokens()={tokens}, estimator(view)={estimator(canonical_json(ctx))}"
    )
    total = cfg.budget.total_max_tokens
    assert not total or tokens <= total, f"BUD-001: {tokens} tokens > total_max_tokens={total}"
    view = ctx.get("conversation_memory", {})
    assert len(view.get("recent_turns", [])) <= cfg.budget.full_zone_turns, (
        f"BUD-003: {len(view['recent_turns'])} recent turns > {cfg.budget.full_zone_turns}"
    )
    summary = view.get("summary", "")
    assert not summary or estimator(summary) <= cfg.budget.summary_max_tokens, (
        f"BUD-002: summary of {estimator(summary)} tokens > {cfg.budget.summary_max_tokens}"
    )
    return view


@scenario("bound:upper")
@req("BUD-001", "BUD-003", "BUD-008")
@cap("truncation")
@pytest.mark.parametrize("policy", TRUNCATE)
@pytest.mark.parametrize("total", [20, 45, 120])
async def test_truncation_stays_within_budget(make_memory, policy, total):
    cfg = _truncation(total, policy)
    memory = await make_memory(cfg)
    for i in range(12):
        await memory.add_turn(turn(i, pad=(i * 7) % 23))
        await _check_invariants(memory, cfg)


@scenario("bound:lower", "bound:upper")
@req("BUD-001", "BUD-003", "BUD-004", "BUD-008")
@cap("truncation")
@pytest.mark.parametrize("policy", TRUNCATE)
@pytest.mark.parametrize("total", [40, 90])
async def test_truncation_budget_keeps_the_newest_turns_that_fit(make_memory, policy, total):
    """Under ``truncation`` the budget drops the oldest recent turns: the view keeps the
    newest turns, in order (no newer turn dropped), and as many as fit (no turn dropped
    while the view would fit with it)."""
    cfg = _truncation(total, policy)
    memory = await make_memory(cfg)
    added: list[Any] = []
    for i in range(12):
        added.append(turn(i, pad=(i * 7) % 23))
        await memory.add_turn(added[-1])
        recent = (await _check_invariants(memory, cfg)).get("recent_turns")
        kept = len(recent or [])
        newest = [t.user_message for t in added[len(added) - kept :]] if kept else []
        if sorted(users(recent)) == sorted(newest):  # the right turns: only the order is off
            assert users(recent) == newest, (
                f"STR-002: after u{i} the view shows {users(recent)}, not in the order added"
            )
        assert users(recent) == newest, (
            f"BUD-004: after u{i} the view keeps {users(recent)}; the budget drops the oldest "
            f"turns first, so it must keep the newest {kept}: {newest}"
        )
        if kept < min(cfg.budget.full_zone_turns, len(added)):
            one_more = [turn_json(t) for t in added[len(added) - kept - 1 :]]
            tokens = default_token_estimator(
                canonical_json({"conversation_memory": {"recent_turns": one_more}})
            )
            assert tokens > total, (
                f"BUD-004: after u{i} the view keeps {kept} turns, but {kept + 1} fit "
                f"({tokens} tokens <= total_max_tokens={total}): a turn was dropped "
                "although the view was within budget with it"
            )


@scenario("bound:upper")
@req("BUD-001", "BUD-002", "BUD-003", "BUD-008")
@cap("rolling_summary")
@pytest.mark.parametrize("policy", TRUNCATE)
@pytest.mark.parametrize("total", [40, 90, 300])
async def test_rolling_summary_stays_within_budget(make_memory, scripted_summarizer, policy, total):
    cfg = config(
        full_zone_turns=2,
        total_max_tokens=total,
        summary_max_tokens=min(total, 30),
        overflow_policy=policy,
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    for i in range(14):
        if i == 5:
            scripted_summarizer.hold()
        if i == 10:
            scripted_summarizer.release()
        await memory.add_turn(turn(i, pad=(i * 5) % 17))
        await _check_invariants(memory, cfg)
    await memory.flush()
    await _check_invariants(memory, cfg)


@req("BUD-008", "BUD-001", "BUD-002", "BUD-003")
@cap("truncation")
@pytest.mark.parametrize("estimator", [_words, lambda s: len(s) // 3 + 2], ids=["words", "len3"])
@pytest.mark.parametrize("total", [0, 60])
async def test_estimate_uses_the_configured_estimator(make_memory, estimator, total):
    """Measured, and under a limit trimmed, by the configured estimator."""
    cfg = config(
        "truncation",
        full_zone_turns=3,
        total_max_tokens=total,
        summary_max_tokens=20,
        token_estimator=estimator,
    )
    memory = await make_memory(cfg)
    for i in range(5):
        await memory.add_turn(turn(i, pad=20 if total else i, digest=i % 2 == 0))
        await _check_invariants(memory, cfg, estimator)


@req("BUD-008", "BUD-001", "BUD-002", "BUD-003")
@cap("rolling_summary")
@pytest.mark.parametrize("estimator", [_words, lambda s: len(s) // 3 + 2], ids=["words", "len3"])
@pytest.mark.parametrize("total", [0, 120])
async def test_estimate_with_pending_turns_uses_the_configured_estimator(
    make_memory, scripted_summarizer, estimator, total
):
    """The same with a summary and pending turns in the view (the next call held), limited
    or not; under the limit the oldest pending turns are hidden, so a count of the pending
    turns shown must leave them out."""
    cfg = config(
        full_zone_turns=1, total_max_tokens=total, summary_max_tokens=20, token_estimator=estimator
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 is evicted and summarized
    await memory.flush()
    await _check_invariants(memory, cfg, estimator)
    scripted_summarizer.hold()
    for i in range(2, 9):
        await memory.add_turn(turn(i, pad=i * 3, digest=i % 2 == 0))
        await _check_invariants(memory, cfg, estimator)
    view = await memory_view(memory)
    assert view.get("summary"), f"check setup: {view}"
    # The newest pending turn fits these budgets: a view hiding it hides one too many.
    assert view.get("pending_turns"), (
        f"BUD-010: no pending turn is shown, though the newest fits the budget: {view}"
    )
    # A long turn: under the limit it leaves no room for any pending turn.
    await memory.add_turn(ConversationTurn(user_message="w " * 150, assistant_response="a"))
    await _check_invariants(memory, cfg, estimator)
    scripted_summarizer.release()


@scenario("bound:lower", "bound:upper")
@req("BUD-004", "BUD-010", "BUD-001", "BUD-002", "BUD-003", "BUD-008")
@cap("rolling_summary")
async def test_truncate_oldest_hides_the_oldest_pending(make_memory, scripted_summarizer):
    cfg = config(full_zone_turns=2, total_max_tokens=70, summary_max_tokens=20)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    added = [turn(i, pad=6) for i in range(10)]
    for t in added:
        await memory.add_turn(t)
    view = await _check_invariants(memory, cfg)
    pending = view.get("pending_turns", [])
    evicted = [turn_json(t) for t in added[: len(added) - len(view["recent_turns"])]]
    newest = evicted[len(evicted) - len(pending) :]
    if pending != newest and sorted(users(pending)) == sorted(users(newest)):
        raise AssertionError(
            f"WM-005: the visible pending turns are the newest evicted, shown out of the "
            f"order they were added: {users(pending)}"
        )
    assert pending == newest, "BUD-004: visible pending must be the newest evicted turns"
    # BUD-010: one more (older) pending turn would not have fitted.
    if len(pending) < len(evicted):
        bigger = dict(view, pending_turns=evicted[len(evicted) - len(pending) - 1 :])
        tokens = default_token_estimator(canonical_json({"conversation_memory": bigger}))
        assert tokens > cfg.budget.total_max_tokens, (
            "BUD-010: a hidden pending turn would have fitted"
        )
    scripted_summarizer.release()


@scenario("bound:lower", "bound:upper")
@req("BUD-010", "BUD-004", "BUD-001")
@cap("rolling_summary")
@pytest.mark.parametrize("policy", TRUNCATE)
async def test_many_pending_turns_of_varied_sizes(make_memory, scripted_summarizer, policy):
    """Forty pending turns of uneven sizes while every call is held: after each turn the
    visible pending turns are exactly the kit model's, the longest run of newest pending
    turns that fits (no more, and no fewer)."""
    cfg = config(
        full_zone_turns=2, total_max_tokens=400, summary_max_tokens=50, overflow_policy=policy
    )
    model = SpecModel(cfg)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    for i in range(40):
        t = turn(i, pad=(i * 37) % 90)
        model.add(t)
        await memory.add_turn(t)
        # The estimate first: a backend measuring another text trims by it (BUD-008).
        # Recent first (BUD-004): a backend evicting recent turns shows other pending ones.
        _assert_view_is_the_models(await _check_invariants(memory, cfg), model, f"after u{i}")
    scripted_summarizer.release()


def _first_call_answers(
    summary: str, release: asyncio.Event | None = None
) -> tuple[Callable[[Any], Awaitable[dict[str, str]]], list[dict[str, Any]]]:
    """A summarizer whose first call returns ``summary`` (once ``release`` is set, if
    given) and whose later calls stay in flight, so nothing else changes the view; and the
    payloads it is sent, in call order."""
    calls: list[dict[str, Any]] = []

    async def summarizer(payload: Any) -> dict[str, str]:
        calls.append(copy.deepcopy(dict(payload)))
        if len(calls) == 1:
            if release is not None:
                await release.wait()
            return {"summary": summary}
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return summarizer, calls


def _assert_view_is_the_models(view: dict[str, Any], model: SpecModel, when: str) -> None:
    """The recent and visible pending turns of ``view`` are exactly ``model``'s (BUD-004,
    BUD-010), blamed on BUD-004 when recent differs and on BUD-010 when pending does.
    The view's shape comes first (STR-003): an empty list it should leave out is measured
    too, so the trimming that follows from it differs."""
    empty = sorted(k for k in ("summary", "pending_turns") if k in view and not view[k])
    assert not empty and "recent_turns" in view, (
        f"STR-003: {when} the view's keys are {sorted(view)}: recent_turns is always present, "
        "summary and pending_turns only when not empty"
    )
    got = view.get("recent_turns") or []
    want = [m.rendered for m in model.recent]
    assert got == want, (
        f"BUD-004: {when} recent holds {users(got)}, the spec {users(want)}: pending turns "
        "are hidden first, then the oldest recent turns are evicted until the view fits"
    )
    got = view.get("pending_turns") or []
    want = [m.rendered for m in model.visible_pending]
    if got != want and sorted(users(got)) == sorted(users(want)):
        raise AssertionError(f"WM-005: {when} the pending turns are out of order")
    covered = {m.rendered["user"] for m in model.turns if m.place == "summarized"}
    kept = [u for u in users(got) if u in covered]
    assert not kept, (
        f"WM-003: {when} the view shows {kept} as pending, which an installed summary covers: "
        "its install must remove exactly the turns sent to its call"
    )
    assert got == want, (
        f"BUD-010: {when} the view shows {len(got)} pending turns ({users(got)[:1]}...), the "
        f"spec {len(want)} ({users(want)[:1]}...): the longest run of newest pending turns "
        "that fits"
    )


@scenario("bound:lower", "bound:upper")
@req("BUD-004", "BUD-001", "BUD-010")
@cap("rolling_summary")
@pytest.mark.parametrize("policy", TRUNCATE)
async def test_recent_turns_over_the_budget_are_evicted_once_pending_is_hidden(
    make_memory, scripted_summarizer, policy
):
    """Calls held; short turns (some stay visible as pending) and long ones, alone or two in
    a row. Adding a long turn, the window evicts a short one to pending, and hiding every
    pending turn is not enough: recent alone is over the budget, so its oldest turns go too
    (to pending, hidden). A backend that stops trimming once nothing pending is visible, with
    one or several pending turns to hide, ends over the budget."""
    cfg = config(
        full_zone_turns=2, total_max_tokens=60, summary_max_tokens=20, overflow_policy=policy
    )
    model = SpecModel(cfg)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    pads = [2, 1, 4, 1, 100, 100, 100, 150, 3, 1, 100, 0, 150, 150, 0, 100, 4, 3, 1, 150]
    for i, pad in enumerate(pads):
        t = turn(i, pad=pad)
        model.add(t)
        await memory.add_turn(t)
        view = await _check_invariants(memory, cfg)
        _assert_view_is_the_models(view, model, f"after u{i}")
    evicted_by_budget = sum(m.evicted_by == "BUD-004" for m in model.turns)
    assert evicted_by_budget >= 3, "check setup: the budget never evicted a recent turn"
    scripted_summarizer.release()


@scenario("bound:lower", "bound:upper")
@req("BUD-010", "BUD-004", "BUD-001")
@cap("rolling_summary")
async def test_a_summary_over_many_pending_turns_hides_them_in_one_step(make_memory):
    """A long summary installed while thirty turns evicted during its call wait: it takes
    room that several pending turns held, so several are hidden at once (not one per
    ``add_turn``). The visible pending turns are then exactly the kit model's, no more and
    no fewer: a search that hides too many, or stops before the view fits, shows here. The
    next call stays in flight, so nothing else changes the view meanwhile.
    (``truncate_oldest``: under ``truncate_summary`` the summary would be shortened instead.)"""
    summary = "The user and the assistant discussed retries. " * 11  # 132 tokens
    first_done = asyncio.Event()
    summarizer, calls = _first_call_answers(summary, first_done)
    # Thirty pending turns, under a backlog limit no run reaches (WM-006 is not checked here).
    # The first call waits for all forty turns: no summarizer timeout, which a backend of
    # 100 ms per add_turn reaches at the default of 2 s (WM-008 is not checked here either).
    cfg = config(
        full_zone_turns=2,
        total_max_tokens=700,
        summary_max_tokens=200,
        recovery_backlog_limit=1000,
        summarizer_timeout_s=None,
    )
    model = SpecModel(cfg)
    memory = await make_memory(cfg, summarizer=summarizer)
    for i in range(40):
        t = turn(i, pad=(i * 37) % 90)
        model.add(t)
        await memory.add_turn(t)
        await asyncio.sleep(0)  # the first call starts with u0 alone
    # Recent and the visible pending turns as the spec has them (BUD-004, BUD-010) before
    # the summary: what follows is the install's.
    view = await _check_invariants(memory, cfg)
    _assert_view_is_the_models(view, model, "before the summary")
    before = len(view.get("pending_turns") or [])
    first_done.set()
    view = await summary_or_failure(memory)
    assert view.get("summary") == summary, (
        f"WM-003: the first call's summary (within summary_max_tokens) was not installed "
        f"(health {memory.health.value!r})"
    )
    model.install(calls[0], summary)
    # The turns evicted during the call stay pending (WM-003): the next call is sent them.
    await eventually(lambda: len(calls) > 1, what="WM-003: a call for the turns evicted meanwhile")
    sent, want = users(calls[1]["turns"]), [m.rendered["user"] for m in model.pending]
    if not sent or sent != want[: len(sent)]:
        skipped = want[: want.index(sent[0])] if sent and sent[0] in want else want
        hidden = {m.rendered["user"] for m in model.pending if m.was_hidden}
        deleted = bool(skipped) and set(skipped) <= hidden
        raise AssertionError(
            f"{'WM-006' if deleted else 'WM-003'}: the next call was sent "
            f"{[u[:4] for u in sent[:3]]}..., not the pending turns from {want[0][:4]} on: "
            + (
                "pending turns the budget hid were deleted, not kept until a summary covers them"
                if deleted
                else "the turns evicted during the first call must stay pending"
            )
        )
    _assert_view_is_the_models(await _check_invariants(memory, cfg), model, "after the summary")
    hidden_at_once = before - len(model.visible_pending) - len(calls[0]["turns"])
    assert hidden_at_once >= 3, f"check setup: the summary hid only {hidden_at_once} turns"


@scenario("bound:lower", "bound:upper")
@req("BUD-007", "BUD-002")
@cap("rolling_summary")
async def test_an_empty_summary_fits_a_summary_limit_of_zero(make_memory):
    """The size of ``""`` is 0 (spec section 0): with ``summary_max_tokens=0`` an empty
    summary is a valid one, installed, and any other text a failed call."""
    answers = ["", "x"]
    summarizer_calls: list[Any] = []

    async def summarizer(payload: Any) -> dict[str, str]:
        summarizer_calls.append(payload)
        return {"summary": answers.pop(0) if answers else "x"}

    cfg = config(full_zone_turns=1, summary_max_tokens=0, retry_backoff_base_s=30.0)
    memory = await make_memory(cfg, summarizer=summarizer)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 evicted: the first call answers ""
    await eventually(lambda: bool(summarizer_calls), what="WM-002: a call for u0 (precondition)")

    async def installed() -> bool:
        return memory.health.value == "healthy" and not (await memory_view(memory)).get(
            "pending_turns"
        )

    for _ in range(50):
        if await installed():
            break
        await asyncio.sleep(0.01)
    assert await installed(), (
        f"BUD-007: an empty summary (size 0) within summary_max_tokens=0 was taken as a "
        f"failed call: health {memory.health.value!r}"
    )
    await memory.add_turn(turn(2))  # u1 evicted: the next call answers "x", size 1 > 0
    await eventually(
        lambda: memory.health.value != "healthy",
        what="BUD-007: a summary of 1 token over summary_max_tokens=0 is a failed call",
    )


@scenario("bound:upper")
@req("BUD-001", "BUD-003", "BUD-008")
@cap("serialization")
@pytest.mark.parametrize("strategy", EITHER_STRATEGY)
async def test_a_state_loaded_under_a_smaller_budget_is_brought_within_it(
    make_memory, scripted_summarizer, strategy
):
    """A state written with no token limit, loaded into a memory of the same window with
    a small one: the view is within the limit right after the load, before any turn."""
    key = MemoryKey("t", "u", f"smaller-budget-{uuid.uuid4().hex}")
    wide = config(strategy, full_zone_turns=3, total_max_tokens=0)
    writer = await make_memory(wide, key=key, summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    for i in range(6):
        await writer.add_turn(turn(i, pad=60))
    state = json_state(writer)
    narrow = config(strategy, full_zone_turns=3, total_max_tokens=60, summary_max_tokens=20)
    reader = await make_memory(narrow, key=key, summarizer=ScriptedSummarizer())
    reader.from_dict(state)
    await _check_invariants(reader, narrow)
    scripted_summarizer.release()


@scenario("bound:upper")
@req("BUD-001", "BUD-003", "BUD-008")
@cap("persistence")
@pytest.mark.parametrize("strategy", EITHER_STRATEGY)
async def test_a_state_hydrated_under_a_smaller_budget_is_brought_within_it(
    make_memory, scripted_summarizer, stm_provider, stm_store, strategy
):
    """The same through a store: saved with no token limit, hydrated into a memory with a
    small one. ``hydrate`` is a load like ``from_dict``: the view is within the limit right
    after it."""
    key = MemoryKey("t", "u", f"smaller-budget-hydrated-{uuid.uuid4().hex}")
    storage = stm_provider.key_for_storage(key)
    wide = config(strategy, full_zone_turns=3, total_max_tokens=0)
    writer = await make_memory(wide, key=key, summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    for i in range(6):
        await writer.add_turn(turn(i, pad=60))
    await writer.persist(stm_store, storage)
    narrow = config(strategy, full_zone_turns=3, total_max_tokens=60, summary_max_tokens=20)
    reader = await make_memory(narrow, key=key, summarizer=ScriptedSummarizer())
    await reader.hydrate(stm_store, storage)
    await _check_invariants(reader, narrow)
    scripted_summarizer.release()


@scenario("bound:upper")
@req("BUD-001", "BUD-004", "SER-004")
@cap("rolling_summary")
@cap("serialization")
async def test_a_loaded_summary_within_its_limit_but_over_the_total_is_shortened(make_memory):
    """``full_zone_turns=0`` and ``summary_max_tokens`` equal to ``total_max_tokens``: a
    loaded summary of exactly that size is valid, but with the view's keys it is over the
    limit, and with no turn to hide or evict it must be shortened at load (BUD-004)."""
    total = 40
    summary = "summary " * 19 + "end"  # exactly 39 tokens by itself
    assert default_token_estimator(summary) <= total, "check setup"
    folder = resources.files("stm_conformance") / "data" / "penguiflow_v1"
    state = json.loads((folder / "rolling_summary_healthy.json").read_text(encoding="utf-8"))
    state.update(summary=summary, turns=[], pending=[])
    cfg = config(full_zone_turns=0, total_max_tokens=total, summary_max_tokens=total)
    memory = await make_memory(cfg, summarizer=ScriptedSummarizer())
    try:
        memory.from_dict(state)
    except ValueError:
        return  # refusing the state keeps BUD-001 too
    view = await _check_invariants(memory, cfg)
    assert summary.endswith(view.get("summary", "")), (
        "BUD-004: a loaded summary is shortened to a tail (its newest text)"
    )


@scenario("bound:lower", "bound:upper")
@req("BUD-010", "BUD-004", "BUD-001")
@cap("rolling_summary")
async def test_room_a_summary_frees_shows_pending_turns_hidden_before_it(make_memory):
    """The view is a function of the state, not of its history. A call is sent ten
    pending turns; while it runs, more turns come and the budget hides the oldest pending
    ones, fewer than ten. Its short summary covers the ten, the hidden ones and others that
    were shown: that frees room, and fewer pending turns need hiding than before. A backend
    that hides as many as before, trimming on from where it was, hides newer turns that
    fit. The calls after it stay in flight, so nothing else changes the view."""
    answers = [asyncio.Event(), asyncio.Event()]
    calls: list[dict[str, Any]] = []

    async def summarizer(payload: Any) -> dict[str, str]:
        calls.append(copy.deepcopy(dict(payload)))
        index = len(calls) - 1
        if index >= len(answers):
            await asyncio.Event().wait()
        await answers[index].wait()
        return {"summary": f"s{index}"}

    cfg = config(full_zone_turns=2, total_max_tokens=320, summary_max_tokens=20)
    model = SpecModel(cfg)
    memory = await make_memory(cfg, summarizer=summarizer)

    async def add(i: int) -> None:
        t = turn(i, pad=(i * 37) % 40)
        model.add(t)
        await memory.add_turn(t)

    await add(0)
    await add(1)
    await add(2)  # u0 evicted: the first call is sent u0 alone
    await eventually(lambda: len(calls) == 1, what="WM-002: a call for u0 (precondition)")
    for i in range(3, 13):
        await add(i)
    answers[0].set()
    await eventually(lambda: len(calls) == 2, what="WM-003: a call for the turns after u0")
    model.install(calls[0], "s0")
    assert len(calls[1]["turns"]) == 10, (
        f"WM-003: the second call was sent {len(calls[1]['turns'])} turns, not the 10 "
        "evicted during the first (u1..u10)"
    )
    for i in range(13, 24):
        await add(i)
    shown = [m.rendered["user"] for m in model.visible_pending]
    hidden = [m.rendered["user"] for m in model.pending if m.rendered["user"] not in shown]
    assert 0 < len(hidden) < 10, f"check setup: {len(hidden)} pending turns hidden, not 1..9"
    _assert_view_is_the_models(await _check_invariants(memory, cfg), model, "before the summary")
    answers[1].set()
    await eventually(lambda: len(calls) == 3, what="WM-003: a call for the turns after u10")
    model.install(calls[1], "s1")
    view = await _check_invariants(memory, cfg)
    _assert_view_is_the_models(view, model, "after a summary of shown and hidden turns")
    still_hidden = len(model.pending) - len(model.visible_pending)
    assert still_hidden < len(hidden), (
        f"check setup: {still_hidden} pending turns hidden after the summary, "
        f"{len(hidden)} before: it freed no room"
    )


@scenario("bound:lower", "bound:upper")
@req("BUD-004", "BUD-001")
@cap("rolling_summary")
async def test_with_nothing_else_left_to_trim_the_summary_is_shortened(make_memory):
    """``truncate_oldest``, ``full_zone_turns=0`` and ``summary_max_tokens`` equal to
    ``total_max_tokens``: a summary within that size is valid, but with the view's own
    keys it is over the limit. No turn is left to hide or evict, so the summary is shortened
    to the longest tail that fits: the kit model's, no shorter and no longer."""
    text = "summary " * 19 + "end"  # 155 characters: 39 tokens by themselves
    # A summary at its limit; one whose first character alone need go; one whose longest
    # tail a search that skips a candidate length misses.
    for total, summary in ((40, text), (52, text[:152]), (40, text[:154])):
        await _shortened_alone(make_memory, total, summary)


async def _shortened_alone(make_memory: Any, total: int, summary: str) -> None:
    calls: list[Any] = []

    async def summarizer(payload: Any) -> dict[str, str]:
        calls.append(copy.deepcopy(dict(payload)))
        return {"summary": summary}

    cfg = config(full_zone_turns=0, total_max_tokens=total, summary_max_tokens=total)
    model = SpecModel(cfg)
    memory = await make_memory(cfg, summarizer=summarizer)
    model.add(turn(0))
    await memory.add_turn(turn(0))
    # The estimate first: a backend that measures other text trims by it (BUD-008).
    await _check_invariants(memory, cfg)
    view = await summary_or_failure(memory)
    assert calls, f"WM-002: u0, evicted by a window of 0, reached no summarizer call: {view}"
    assert view.get("summary") and memory.health.value == "healthy", (
        f"BUD-004: a summary within summary_max_tokens was not installed, shortened or not "
        f"(health {memory.health.value!r}, view {view})"
    )
    model.install(calls[0], summary)
    view = await _check_invariants(memory, cfg)
    assert view.get("summary") == model.summary, (
        f"BUD-004: with nothing else left, a summary of {len(summary)} characters is "
        f"shortened to its longest tail that fits total_max_tokens={total}: "
        f"{len(model.summary)} characters, got {len(view.get('summary', ''))}"
    )
    assert model.summary and model.summary != summary, "check setup: the summary fit as is"


@scenario("bound:upper")
@req("BUD-005", "BUD-001", "BUD-002", "BUD-003", "BUD-008")
@cap("rolling_summary")
async def test_truncate_summary_shortens_the_summary_first(make_memory):
    cfg = config(
        full_zone_turns=1,
        total_max_tokens=120,
        summary_max_tokens=60,
        overflow_policy="truncate_summary",
    )
    scripted_summarizer = ScriptedSummarizer(max_chars=200)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    for i in range(6):
        await memory.add_turn(turn(i, pad=60))
    await memory.flush()
    full_summary = (await memory_view(memory))["summary"]
    scripted_summarizer.hold()
    shortened = 0
    for i in range(6, 9):
        await memory.add_turn(turn(i, pad=60))
        view = await _check_invariants(memory, cfg)
        summary = view.get("summary", "")
        assert full_summary.endswith(summary), "BUD-005: the summary must keep its newest text"
        if summary:
            evicted = [f"u{j}" + "x" * 60 for j in range(5, i)]
            assert users(view.get("pending_turns")) == evicted, (
                "BUD-005: pending turns may be hidden only once the summary is gone"
            )
        if len(summary) < len(full_summary):
            # The longest tail: one character more would not have fitted (an empty
            # summary too: its last character alone must not fit).
            longer = dict(view, summary=full_summary[-(len(summary) + 1) :])
            tokens = default_token_estimator(canonical_json({"conversation_memory": longer}))
            assert tokens > cfg.budget.total_max_tokens, (
                f"BUD-005: after u{i} the summary was shortened to {len(summary)} of "
                f"{len(full_summary)} characters, but its tail one character longer fits "
                f"({tokens} <= {cfg.budget.total_max_tokens} tokens): the longest tail is kept"
            )
            shortened += len(summary) > 0
    assert shortened, "check setup: no view held a partly shortened summary"
    scripted_summarizer.release()


@req("BUD-005")
@cap("rolling_summary")
async def test_a_summary_within_its_limit_is_shortened_when_the_view_needs_it(make_memory):
    """A summary within ``summary_max_tokens`` can still be more than the view has room for
    once turns come: ``truncate_summary`` shortens it then, to its newest text, and every
    ``add_turn`` returns (shortening MUST terminate, whatever the summary's own limit)."""
    summarizer = OneSummary()
    cfg = config(**SHORTENING_BUDGET)
    memory = await make_memory(cfg, summarizer=summarizer)
    try:
        installed = (await install_one_summary_to_shorten(memory))["summary"]
        for i in range(3, 6):
            await memory.add_turn(turn(i, pad=100))
            view = await memory_view(memory)
            summary = view.get("summary", "")
            assert installed.endswith(summary), (
                f"BUD-005: after u{i} the summary is {summary!r:.60}, not a tail of the one "
                f"installed: shortening keeps its newest text"
            )
            tokens = view_tokens(cfg, {"conversation_memory": view})
            assert tokens <= cfg.budget.total_max_tokens, (
                f"BUD-005: after u{i} the view has {tokens} tokens, over total_max_tokens="
                f"{cfg.budget.total_max_tokens}"
            )
        assert len(summary) < len(installed), "check setup: the summary was never shortened"
    finally:
        summarizer.release()


@scenario("direction:accept", "direction:reject")
@req("BUD-006")
@pytest.mark.parametrize("strategy", EITHER_STRATEGY)
@pytest.mark.parametrize("include_digest", [True, False], ids=["digest-shown", "digest-hidden"])
async def test_error_policy_measures_the_turn_as_the_view_shows_it(
    make_memory, stm_provider, strategy, include_digest
):
    """A turn whose text fits but whose trajectory digest does not: refused while the view
    shows digests, accepted when it leaves them out (``include_trajectory_digest=False``).
    The turn is measured as the view would show it, no more and no less."""
    cfg = config(
        strategy,
        full_zone_turns=2,
        total_max_tokens=60,
        summary_max_tokens=20,
        overflow_policy="error",
        include_trajectory_digest=include_digest,
    )
    memory = await make_memory(cfg)
    await memory.add_turn(turn(9, digest=True))
    shown = "trajectory_digest" in json.dumps(await memory.get_llm_context())
    assert shown == include_digest, (
        f"STR-004: with include_trajectory_digest={include_digest} the view "
        f"{'leaves out' if include_digest else 'shows'} a turn's digest (precondition)"
    )
    big = ConversationTurn(
        user_message="u0",
        assistant_response="a0",
        trajectory_digest=TrajectoryDigest(
            tools_invoked=["search"], observations_summary="ö" * 300, reasoning_summary=None
        ),
    )
    before = await memory.get_llm_context()
    try:
        await memory.add_turn(big)
    except stm_provider.budget_exceeded_error:
        assert include_digest, (
            "BUD-006: a turn of a few tokens was refused although the view leaves its digest "
            "out (include_trajectory_digest=False)"
        )
        assert await memory.get_llm_context() == before, "BUD-006: the view changed on error"
        return
    assert not include_digest, (
        f"BUD-006: a turn whose digest alone is over total_max_tokens="
        f"{cfg.budget.total_max_tokens} was accepted while the view shows digests: its "
        f"digest was not measured (the view now counts {memory.estimate_tokens()} tokens)"
    )


@scenario("direction:accept", "direction:reject", "bound:lower", "bound:upper")
@req("BUD-006")
@pytest.mark.parametrize("strategy", EITHER_STRATEGY)
async def test_error_policy_is_atomic(
    make_memory, scripted_summarizer, recording_callbacks, stm_provider, strategy
):
    # Callbacks and to_dict() are watched only where the backend declares them.
    declared = stm_provider.capabilities
    callbacks = "callbacks" in declared
    cfg = config(
        strategy,
        full_zone_turns=2,
        total_max_tokens=60,
        summary_max_tokens=20,
        overflow_policy="error",
        **(recording_callbacks.config_kwargs() if callbacks else {}),
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    raised = False
    accepted: list[Any] = []
    for i in range(30):
        if callbacks:
            await recording_callbacks.wait_for("turns", i)  # earlier turns' callbacks delivered
        before_view = await memory.get_llm_context()
        before_tokens = memory.estimate_tokens()
        before_state = memory.to_dict() if "serialization" in declared else None
        before_turns = len(recording_callbacks.turns)
        before_calls = len(scripted_summarizer.calls)
        try:
            await memory.add_turn(turn(i, pad=100))
        except stm_provider.budget_exceeded_error:
            raised = True
            if strategy == "truncation":  # the view it refused: the newest turns, new one included
                recent = [turn_json(t) for t in [*accepted, turn(i, pad=100)][-2:]]
                would_be = canonical_json({"conversation_memory": {"recent_turns": recent}})
                assert default_token_estimator(would_be) > cfg.budget.total_max_tokens, (
                    f"BUD-006: add_turn raised although the view with the turn fits "
                    f"({default_token_estimator(would_be)} <= {cfg.budget.total_max_tokens})"
                )
            if callbacks:
                await recording_callbacks.settle()
            assert await memory.get_llm_context() == before_view, "view changed on error"
            assert memory.estimate_tokens() == before_tokens, "tokens changed on error"
            if before_state is not None:
                assert state_text(memory) == json.dumps(before_state, sort_keys=True), (
                    "to_dict() changed on error"
                )
            assert len(recording_callbacks.turns) == before_turns, "on_turn_added ran on error"
            assert len(scripted_summarizer.calls) == before_calls, "summarizer ran on error"
            break
        accepted.append(turn(i, pad=100))
        assert memory.estimate_tokens() <= cfg.budget.total_max_tokens, (
            "the error policy let the view exceed total_max_tokens instead of raising"
        )
    assert raised, "the error policy never raised although the budget was exceeded"
    scripted_summarizer.release()


@scenario("direction:accept", "direction:reject", "bound:lower", "bound:upper")
@req("BUD-006")
@cap("rolling_summary")
async def test_error_policy_measures_pending_turns_and_the_summary(make_memory, stm_provider):
    """Under ``error``, with a summary installed and the next call in flight (evicted turns
    stay pending): each turn is refused exactly when the view with it -- recent, every
    pending turn and the summary -- would exceed ``total_max_tokens``, and taken otherwise,
    once at exactly the limit. The kit model decides; a refusal changes nothing."""
    summarizer, calls = _first_call_answers(_SUMMARY)
    memory, model = await _summarized_under_error_policy(make_memory, summarizer, calls)
    refused, at_limit = await _add_under_error_policy(
        memory, model, stm_provider, [50, 11, 44, 25, 41, 58, 5, 30, 32, 55, 3, 11], start=3
    )
    assert refused >= 2 and at_limit == 1, f"check setup: {refused} refused, {at_limit} at limit"


_SUMMARY = "Earlier: the user asked how services should retry failed calls. "


async def _summarized_under_error_policy(
    make_memory: Any, summarizer: Any, calls: list[dict[str, Any]], **extra: Any
) -> tuple[Any, SpecModel]:
    """A memory under ``error`` (``total_max_tokens=150``, a window of two) whose first
    call, for u0, installed ``_SUMMARY``; and the kit model of it. ``summarizer`` answers
    its first call so and records every payload in ``calls``."""
    cfg = config(
        full_zone_turns=2,
        total_max_tokens=150,
        summary_max_tokens=40,
        overflow_policy="error",
        **extra,
    )
    model = SpecModel(cfg)
    memory = await make_memory(cfg, summarizer=summarizer)
    for t in [turn(0), turn(1), turn(2)]:
        model.add(t)
        await memory.add_turn(t)
    view = await summary_or_failure(memory)
    assert view.get("summary") == _SUMMARY, (
        f"WM-003: the first call's summary was not installed (health {memory.health.value!r})"
    )
    model.install(calls[0], _SUMMARY)
    return memory, model


async def _add_under_error_policy(
    memory: Any,
    model: SpecModel,
    stm_provider: Any,
    pads: list[int],
    *,
    start: int,
    before_each: Callable[[SpecModel], Awaitable[None]] | None = None,
) -> tuple[int, int]:
    """Add ``turn(i, pad=pad)`` for each pad under ``error``, the kit model deciding each:
    refused exactly when the view with it would exceed ``total_max_tokens``, and then
    unchanged. ``before_each`` checks what the check relies on before each turn. How many
    were refused, and how many taken at exactly the limit."""
    total = model.config.budget.total_max_tokens
    refused = at_limit = 0
    for i, pad in enumerate(pads, start=start):
        if before_each is not None:
            await before_each(model)
        t = turn(i, pad=pad)
        trial = copy.deepcopy(model)
        trial.add(t)
        want = trial.tokens()
        before = await memory.get_llm_context()
        try:
            await memory.add_turn(t)
        except stm_provider.budget_exceeded_error:
            assert want > total, (
                f"BUD-006: u{i} was refused, but the view with it has {want} tokens, within "
                f"total_max_tokens={total} ({len(trial.pending)} pending turns and the summary "
                "counted)"
            )
            assert await memory.get_llm_context() == before, "BUD-006: view changed on error"
            refused += 1
            continue
        assert want <= total, (
            f"BUD-006: u{i} was taken, but the view with it has {want} tokens > "
            f"total_max_tokens={total}: {len(trial.pending)} pending turns and the summary count"
        )
        model = trial
        at_limit += want == total
    return refused, at_limit


@scenario("direction:accept", "direction:reject", "bound:upper")
@req("BUD-006")
@cap("rolling_summary")
async def test_error_policy_measures_the_summary_while_retrying(make_memory, stm_provider):
    """The same in RETRY, after a call failed: the view still shows the summary and every
    pending turn (only DEGRADED shows recent turns alone), so ``error`` measures them."""
    calls: list[Any] = []

    async def summarizer(payload: Any) -> dict[str, str]:
        calls.append(copy.deepcopy(dict(payload)))
        if len(calls) == 1:
            return {"summary": _SUMMARY}
        raise RuntimeError("the summarizer is down")

    memory, model = await _summarized_under_error_policy(
        make_memory, summarizer, calls, retry_backoff_base_s=30.0
    )
    model.add(turn(3))
    await memory.add_turn(turn(3))  # u1 evicted: the second call fails
    await eventually(
        lambda: memory.health.value == "retry",
        what="HLT-002: RETRY after a failed call (precondition)",
    )
    failed_batch = [t.rendered["user"] for t in model.pending]  # pending when RETRY began

    async def still_retrying(model: SpecModel) -> None:
        # What the model relies on: no retry within the 30 s backoff, the summary and the
        # turns pending when RETRY began still shown (HLT-003), and the turns evicted since
        # pending too (WM-002; the error policy hides none).
        if memory.health.value != "retry":
            raise PreconditionError(
                f"HLT-002: the memory left RETRY ({memory.health.value}) long before its "
                "30 s backoff ended"
            )
        view = await memory_view(memory)
        shown = users(view.get("pending_turns", []))
        held = [t.rendered["user"] for t in model.pending]
        if view.get("summary") != _SUMMARY or not set(failed_batch) <= set(shown):
            raise PreconditionError(
                f"HLT-003: in RETRY the view shows the summary {view.get('summary')!r} and "
                f"pending {shown}, not the last good summary and the pending {failed_batch}"
            )
        if shown != held:
            raise PreconditionError(
                f"WM-002: in RETRY pending shows {shown}, not the turns evicted: {held}"
            )

    refused, _ = await _add_under_error_policy(
        memory,
        model,
        stm_provider,
        [44, 25, 41, 58, 5, 30, 32, 55],
        start=4,
        before_each=still_retrying,
    )
    assert refused >= 1, f"check setup: {refused} refused"


@scenario("direction:accept", "bound:lower")
@req("BUD-007", "HLT-007")
@cap("rolling_summary")
@pytest.mark.parametrize(
    "text",
    [
        "é" * 119,
        # Quotes and line ends, which JSON escapes: a summary is sized as itself, not as
        # the view's JSON spells it (section 0).
        'said "ok"\n' * 11 + "a" * 9,
    ],
    ids=["non-ascii", "escaped"],
)
async def test_a_summary_of_exactly_summary_max_tokens_is_installed(make_memory, text):
    """The other side of BUD-007: a summary at the limit (not over it) is a success, even
    made of non-ASCII text or of characters JSON escapes, and is installed whole."""
    limit = 30
    summary = text  # the estimator counts characters: exactly `limit`
    assert default_token_estimator(summary) == limit, "check setup"
    assert default_token_estimator(summary + "é") == limit + 1, "check setup"

    async def summarizer(payload: Any) -> dict[str, str]:
        return {"summary": summary}

    cfg = config(
        full_zone_turns=1, summary_max_tokens=limit, total_max_tokens=500, retry_backoff_base_s=5.0
    )
    memory = await make_memory(cfg, summarizer=summarizer)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    view = await summary_or_failure(memory)
    assert memory.health.value == "healthy", (
        f"BUD-007: a summary of exactly summary_max_tokens={limit} tokens was treated as a "
        f"failure (health {memory.health.value!r})"
    )
    assert view.get("summary") == summary, (
        f"BUD-007: a summary of exactly summary_max_tokens={limit} tokens was not installed "
        f"whole: {view.get('summary')!r:.80}"
    )


@scenario("direction:accept", "bound:lower")
@req("BUD-006")
@cap("truncation")
async def test_error_policy_accepts_a_view_of_exactly_the_limit(make_memory, stm_provider):
    """``error`` raises when the view *would exceed* ``total_max_tokens``: a view of exactly
    the limit is accepted, one token more is refused; with no limit (0) nothing is. The
    second turn's text is mostly characters JSON escapes (a quote, a backslash, a line end,
    a tab, a control character): the view shows them escaped, and so measures them."""
    escaped = '"\\\n\t\x01' * 6  # 30 characters, 84 once escaped
    first = turn(0, pad=30)
    second = ConversationTurn(user_message=f"u1{escaped}", assistant_response="a1")

    def size(turns: list[Any]) -> int:
        recent = [turn_json(t) for t in turns]
        return default_token_estimator(
            canonical_json({"conversation_memory": {"recent_turns": recent}})
        )

    exact = size([first, second])
    memory = await make_memory(
        config(
            "truncation",
            full_zone_turns=2,
            total_max_tokens=exact,
            summary_max_tokens=1,
            overflow_policy="error",
        )
    )
    try:
        await memory.add_turn(first)
        await memory.add_turn(second)
    except stm_provider.budget_exceeded_error as exc:
        raise AssertionError(
            f"BUD-006: a view of exactly total_max_tokens={exact} was refused: {exc}"
        ) from exc
    tight_cfg = config(
        "truncation",
        full_zone_turns=2,
        total_max_tokens=exact - 1,
        summary_max_tokens=1,
        overflow_policy="error",
    )
    tight = await make_memory(tight_cfg)
    await tight.add_turn(first)
    await _check_invariants(tight, tight_cfg)  # measured as the spec measures (BUD-008)
    with pytest.raises(stm_provider.budget_exceeded_error):
        await tight.add_turn(second)
    unlimited = await make_memory(
        config("truncation", full_zone_turns=2, total_max_tokens=0, overflow_policy="error")
    )
    try:
        for i in range(4):
            await unlimited.add_turn(turn(i, pad=400))
    except stm_provider.budget_exceeded_error as exc:
        raise AssertionError(f"BUD-006: total_max_tokens=0 sets no limit, yet: {exc}") from exc


@scenario("direction:accept", "direction:reject")
@req("BUD-006")
@cap("truncation")
async def test_error_policy_measures_turns_added_at_once_one_after_another(
    make_memory, stm_provider
):
    """Five turns added at once where three fit: each is measured against the view the
    ones before it left, so three are stored and two refused, and the view stays within
    ``total_max_tokens``. A memory that measures, yields, then stores admits them all."""
    turns = [turn(i, pad=30) for i in range(5)]
    three = canonical_json(
        {"conversation_memory": {"recent_turns": [turn_json(t) for t in turns[:3]]}}
    )
    limit = default_token_estimator(three)
    cfg = config(
        "truncation",
        full_zone_turns=5,
        total_max_tokens=limit,
        summary_max_tokens=1,
        overflow_policy="error",
    )
    memory = await make_memory(cfg)
    outcomes = await asyncio.gather(*(memory.add_turn(t) for t in turns), return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, stm_provider.budget_exceeded_error)]
    other = [o for o in outcomes if isinstance(o, BaseException) and o not in refused]
    if other:
        raise other[0]
    view = await memory_view(memory)
    shown, accepted = len(view["recent_turns"]), 5 - len(refused)
    if shown < accepted:  # a turn lost, not a budget kept (a refused turn stored is ours)
        raise AssertionError(
            f"CON-001: of five turns added at once, {accepted} were accepted but the view "
            f"shows {shown}"
        )
    tokens = view_tokens(cfg, {"conversation_memory": view})  # as the spec counts them
    assert len(refused) == 2 and shown == accepted and tokens <= limit, (
        f"BUD-006: of five turns added at once, three of which fit total_max_tokens={limit}, "
        f"{accepted} were accepted and {len(refused)} refused: the view shows {shown} turns, "
        f"{tokens} tokens"
    )


@scenario("direction:reject", "bound:upper")
@req("BUD-007", "HLT-007")
@cap("rolling_summary")
async def test_oversize_summary_is_a_failure(make_memory, scripted_summarizer):
    cfg = config(
        full_zone_turns=1, summary_max_tokens=30, total_max_tokens=500, retry_backoff_base_s=5.0
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_next(1, mode="oversize")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await scripted_summarizer.wait_for_calls(1)
    await eventually(lambda: memory.health.value == "retry", what="RETRY after oversize summary")
    view = await memory_view(memory)
    assert "summary" not in view, f"an oversize summary was installed: {view}"
    assert users(view.get("pending_turns")) == ["u0"], f"HLT-003: RETRY keeps pending: {view}"


@req("BUD-001")
@cap("rolling_summary")
async def test_a_recovery_keeps_the_view_within_budget(make_memory):
    """A recovery that succeeds installs its summary and makes the turns evicted during
    the attempt pending (HLT-006): all of it at once can be more than the budget, and the
    view must be brought within ``total_max_tokens`` then, not at the next turn."""
    summarizer = ScriptedSummarizer(max_chars=80)
    cfg = config(
        full_zone_turns=1,
        total_max_tokens=60,
        summary_max_tokens=40,
        retry_attempts=0,
        degraded_retry_interval_s=0.2,
    )
    memory = await make_memory(cfg, summarizer=summarizer)
    summarizer.fail_always("raise")
    for i in range(3):
        await memory.add_turn(turn(i, pad=20))
    await eventually(lambda: memory.health.value == "degraded", what="HLT-004: DEGRADED")
    summarizer.succeed()
    summarizer.hold()
    try:
        await summarizer.wait_for_calls(len(summarizer.calls) + 1)  # the recovery attempt
    except TimeoutError as exc:
        raise PreconditionError(f"HLT-006: no recovery attempt came by itself: {exc}") from None
    for i in range(3, 6):
        await memory.add_turn(turn(i, pad=20))  # evicted while the attempt runs
    summarizer.let_one_through()  # it succeeds; the call after it stays held
    await eventually(
        lambda: memory.health.value == "healthy", what="HLT-006: HEALTHY after the recovery"
    )
    await _check_invariants(memory, cfg)


@scenario("direction:reject", "direction:accept", "bound:upper")
@req("BUD-007")
@cap("rolling_summary")
@pytest.mark.parametrize("padding", ["", "\n  "], ids=["plain", "padded"])
async def test_a_summary_is_sized_with_the_configured_estimator(make_memory, padding):
    """``summary_max_tokens`` counts with the memory's ``token_estimator``, here one token
    per character: a summary one character over the limit (9 tokens by the default
    estimator) is a failed call, and the retry's summary of exactly the limit is installed.
    Whitespace around a summary is part of it: it is measured, not stripped first."""
    limit = 30
    calls: list[Any] = []
    over = "s" * (limit + 1 - 2 * len(padding))
    first = padding + over + padding  # limit + 1 characters

    async def summarizer(payload: Any) -> dict[str, str]:
        calls.append(payload)
        return {"summary": first if len(calls) == 1 else "s" * limit}

    cfg = config(
        full_zone_turns=1,
        summary_max_tokens=limit,
        total_max_tokens=5000,
        retry_backoff_base_s=0.05,
        token_estimator=len,
    )
    memory = await make_memory(cfg, summarizer=summarizer)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))

    async def installed() -> bool:
        return "summary" in await memory_view(memory)

    async def first_call_judged() -> bool:
        return len(calls) > 1 or memory.health.value != "healthy" or await installed()

    await eventually(first_call_judged, what="BUD-007: the first call's summary judged")
    view = await memory_view(memory)
    assert len(calls) > 1 or "summary" not in view, (
        f"BUD-007: with token_estimator=len and summary_max_tokens={limit}, the first call's "
        f"summary of {limit + 1} characters ({first!r}) was installed as "
        f"{view['summary']!r:.60}: one over the limit by the configured estimator is a "
        f"failed call, not one to cut to size{', nor to strip' if padding else ''}"
    )
    await eventually(
        lambda: len(calls) > 1,
        what="HLT-002: the memory retries the failed call by itself (precondition)",
    )
    await eventually(installed, what="BUD-007: the retry's summary, of exactly the limit")
    summary = (await memory_view(memory))["summary"]
    assert summary == "s" * limit, (
        f"BUD-007: with token_estimator=len and summary_max_tokens={limit}, the summary "
        f"installed is {len(summary)} characters ({len(calls)} call(s)): one over the limit "
        f"by the configured estimator is a failed call"
    )


@scenario("direction:accept", "direction:reject", "bound:lower", "bound:upper")
@req("BUD-009")
@cap("truncation")
@pytest.mark.parametrize("policy", ["truncate_oldest", "truncate_summary", "error"])
async def test_unsatisfiable_budget_is_rejected(make_memory, policy):
    """The limit is the empty view's own size: one token less is refused, exactly it is
    accepted (the empty view ``{"conversation_memory":{"recent_turns":[]}}``), under every
    overflow policy (``error`` too: it would refuse every turn)."""
    empty = {"conversation_memory": {"recent_turns": []}}
    least = default_token_estimator(canonical_json(empty))
    for total in (2, least - 1):
        try:
            await make_memory(
                config(
                    "truncation",
                    total_max_tokens=total,
                    summary_max_tokens=1,
                    overflow_policy=policy,
                )
            )
        except ValueError:
            continue
        raise AssertionError(
            f"BUD-009: total_max_tokens={total} is under the empty view's {least} tokens, yet "
            f"the memory accepted it under overflow_policy={policy!r}"
        )
    # Strategy none shows the empty mapping whatever it is given: any budget fits it.
    try:
        await make_memory(config("none", total_max_tokens=2, summary_max_tokens=1))
    except ValueError as exc:
        raise AssertionError(
            f"BUD-009: strategy none's view is {{}}, within total_max_tokens=2, but the "
            f"memory refused the budget: {exc}"
        ) from exc
    try:
        await make_memory(
            config(
                "truncation", total_max_tokens=least, summary_max_tokens=1, overflow_policy=policy
            )
        )
    except ValueError as exc:
        raise AssertionError(
            f"BUD-009: total_max_tokens={least} fits the empty view ({least} tokens) but the "
            f"memory refused it under overflow_policy={policy!r}: {exc}"
        ) from exc


@scenario("direction:accept", "direction:reject", "bound:lower", "bound:upper")
@req("BUD-009")
@cap("rolling_summary")
async def test_unsatisfiable_budget_is_rejected_under_rolling_summary(make_memory):
    """The same under ``rolling_summary``, whose empty view is the same: one token under it
    is refused, exactly it is accepted."""
    empty = {"conversation_memory": {"recent_turns": []}}
    least = default_token_estimator(canonical_json(empty))
    for total in (2, least - 1):
        try:
            await make_memory(config(total_max_tokens=total, summary_max_tokens=1))
        except ValueError:
            continue
        raise AssertionError(
            f"BUD-009: total_max_tokens={total} is under the empty view's {least} tokens, yet "
            "a rolling_summary memory accepted it"
        )
    try:
        await make_memory(config(total_max_tokens=least, summary_max_tokens=1))
    except ValueError as exc:
        raise AssertionError(
            f"BUD-009: total_max_tokens={least} fits the empty view ({least} tokens) but the "
            f"rolling_summary memory refused it: {exc}"
        ) from exc


@scenario("direction:reject", "bound:upper")
@req("BUD-007", "BUD-001")
@cap("rolling_summary")
async def test_error_policy_refuses_a_summary_that_overflows_the_total(make_memory):
    total, summary_max = 100, 40
    summary = "s" * (summary_max * 4 - 1)  # within summary_max_tokens by itself
    recent = turn(1, pad=170)
    view_after = {"conversation_memory": {"recent_turns": [turn_json(recent)], "summary": summary}}
    assert default_token_estimator(canonical_json(view_after)) > total, "check setup"

    async def summarizer(payload: Any) -> dict[str, str]:
        return {"summary": summary}

    cfg = config(
        full_zone_turns=1,
        total_max_tokens=total,
        summary_max_tokens=summary_max,
        overflow_policy="error",
        retry_backoff_base_s=30.0,
    )
    memory = await make_memory(cfg, summarizer=summarizer)
    await memory.add_turn(turn(0, pad=60))
    await memory.add_turn(recent)
    await eventually(
        lambda: memory.health.value == "retry",
        what="BUD-007: RETRY, as installing the summary would exceed total_max_tokens",
    )
    assert "summary" not in await memory_view(memory), "BUD-007: the summary was installed"
    assert memory.estimate_tokens() <= total, "BUD-001"


@scenario("direction:accept", "direction:reject", "bound:lower", "bound:upper")
@req("BUD-007")
@cap("rolling_summary")
@pytest.mark.parametrize("limit", ["exactly", "one_over", "none"])
async def test_error_policy_measures_the_summary_with_the_turns_evicted_during_its_call(
    make_memory, limit
):
    """Under ``error``: three turns are evicted while the first call runs, so they stay
    pending next to its summary. ``total_max_tokens`` is set (from the kit model) to exactly
    the installed view's size, one token less, or no limit: the summary is installed at the
    limit and without one, and refused (a failed call, RETRY, nothing changed) one over."""
    summary = "The user asked about retries; the assistant advised backoff. " * 5
    turns = [turn(i, pad=(i * 13) % 40) for i in range(6)]
    model = SpecModel(config(full_zone_turns=2, total_max_tokens=0, overflow_policy="error"))
    for t in turns:
        model.add(t)
    model.install({"turns": [model.pending[0].rendered]}, summary)
    total = {"exactly": model.tokens(), "one_over": model.tokens() - 1, "none": 0}[limit]
    release = asyncio.Event()
    summarizer, calls = _first_call_answers(summary, release)  # a retry stays in flight
    cfg = config(
        full_zone_turns=2,
        total_max_tokens=total,
        summary_max_tokens=100,
        overflow_policy="error",
        retry_backoff_base_s=30.0,
    )
    memory = await make_memory(cfg, summarizer=summarizer)
    for i, t in enumerate(turns):
        await memory.add_turn(t)
        if i == 2:
            await eventually(lambda: len(calls) == 1, what="WM-002: a call for u0")
    before = await memory_view(memory)
    assert len(before.get("pending_turns") or []) == 4, f"check setup: {before}"
    release.set()
    view = await summary_or_failure(memory)
    if limit == "one_over":
        assert memory.health.value == "retry" and "summary" not in view, (
            f"BUD-007: a summary whose view (with the 3 turns evicted during its call) is one "
            f"token over total_max_tokens={total} was not treated as a failure (health "
            f"{memory.health.value!r})"
        )
        assert view == before, "HLT-003: in RETRY, after the refused summary, the view changed"
        return
    assert memory.health.value == "healthy" and view.get("summary") == summary, (
        f"BUD-007: a summary whose view (with the 3 turns evicted during its call) fits "
        f"{'exactly' if total else 'with no limit'} (total_max_tokens={total}) was refused "
        f"(health {memory.health.value!r})"
    )
    want = [m.rendered for m in model.pending]
    assert view.get("pending_turns") == want, (
        f"WM-003: the turns evicted during the call must stay pending next to its summary: "
        f"{users(view.get('pending_turns'))}, want {users(want)}"
    )
    assert memory.estimate_tokens() == model.tokens(), (
        f"BUD-008: estimate_tokens()={memory.estimate_tokens()}, estimator(view)={model.tokens()}"
    )


async def _empty_summary_is_left_out(make_memory: Any) -> None:
    """STR-003, as a precondition of a check that sizes a view by the spec's shape: once
    an empty summary is installed, the view has no ``summary`` key."""

    async def empty(payload: Any) -> dict[str, str]:
        return {"summary": ""}

    probe = await make_memory(config(full_zone_turns=1), summarizer=empty)
    await probe.add_turn(turn(0))
    await probe.add_turn(turn(1))
    await returns_within(probe.flush(), what="WM-007: flush() with a summarizer that answers")
    view = await memory_view(probe)
    assert "summary" not in view, (
        f"STR-003: an empty summary installed, the view shows {view}: summary only when not "
        "empty (precondition)"
    )


@scenario("direction:accept", "direction:reject", "bound:lower", "bound:upper")
@req("BUD-007")
@cap("rolling_summary")
@pytest.mark.parametrize("limit", ["exactly", "one_over"])
@pytest.mark.parametrize("summary", ["", "long"])
async def test_error_policy_measures_a_recovery_summary_with_the_turns_evicted_during_it(
    make_memory, summary, limit
):
    """Under ``error``, in DEGRADED: a recovery attempt is sent the backlog [u0]; u1 and u2
    are evicted while it runs, so its summary lands next to them as pending (HLT-006).
    ``total_max_tokens`` is that view's size (from the kit model), or one token less: the
    summary, empty or not, is installed at the limit and is a failed attempt one over.
    Only what the view will show is measured: neither the covered u0 nor an empty summary."""
    if not summary:
        await _empty_summary_is_left_out(make_memory)  # the limit below assumes it
    text = "The user asked about retries; the assistant advised backoff. " * 4 if summary else ""
    turns = [turn(0), *(turn(i, pad=12 + i) for i in (1, 2, 3))]
    model = SpecModel(config(full_zone_turns=1, total_max_tokens=0, overflow_policy="error"))
    model.add(turns[0])
    model.add(turns[1])
    model.fail()  # DEGRADED: u0 in the backlog
    model.add(turns[2])
    model.add(turns[3])  # u1, u2 evicted to the backlog while the attempt runs
    model.install({"turns": [model.backlog[0].rendered]}, text)
    total = model.tokens() - (1 if limit == "one_over" else 0)
    calls: list[dict[str, Any]] = []
    release = asyncio.Event()

    async def summarizer(payload: Any) -> dict[str, str]:
        calls.append(copy.deepcopy(dict(payload)))
        if len(calls) == 1:
            raise RuntimeError("the first call fails")
        if len(calls) == 2:
            await release.wait()
            return {"summary": text}
        await asyncio.Event().wait()  # later attempts stay in flight
        raise AssertionError("unreachable")

    cfg = config(
        full_zone_turns=1,
        total_max_tokens=total,
        summary_max_tokens=min(100, total),
        overflow_policy="error",
        retry_attempts=0,
        degraded_retry_interval_s=0.01,
    )
    memory = await make_memory(cfg, summarizer=summarizer)
    await memory.add_turn(turns[0])
    await memory.add_turn(turns[1])
    await eventually(
        lambda: memory.health.value in ("degraded", "recovering") or len(calls) >= 2,
        what="HLT-004: DEGRADED after a failure with retry_attempts=0 (precondition)",
    )
    assert memory.health.value in ("degraded", "recovering"), (
        f"HLT-004: with retry_attempts=0 the first failed call degrades; the memory is "
        f"{memory.health.value!r} as its second call starts"
    )
    await eventually(lambda: len(calls) == 2, what="HLT-006: a recovery attempt (precondition)")
    sent = users(calls[1]["turns"])
    assert sent == ["u0"], f"HLT-006: the recovery attempt was sent {sent}, want ['u0']"
    await memory.add_turn(turns[2])
    await memory.add_turn(turns[3])
    release.set()
    await eventually(
        lambda: memory.health.value == "healthy" or len(calls) > 2,
        what="the recovery attempt to end",
    )
    view = await memory_view(memory)
    if limit == "one_over":
        assert memory.health.value != "healthy" and "summary" not in view, (
            f"BUD-007: a recovery summary whose view (with the 2 turns evicted during the "
            f"attempt) is one token over total_max_tokens={total} was installed"
        )
        return
    assert memory.health.value == "healthy", (
        f"BUD-007: a recovery summary {'(empty) ' if not text else ''}whose view fits exactly "
        f"(total_max_tokens={total}) was refused (health {memory.health.value!r})"
    )
    want = [m.rendered for m in model.pending]
    assert view.get("summary", "") == text and view.get("pending_turns") == want, (
        f"HLT-006: after the recovery the view is {view}; the spec: {model.view()}"
    )
    assert memory.estimate_tokens() == model.tokens() == total, "BUD-008"


@scenario("direction:accept", "direction:reject", "bound:lower", "bound:upper")
@req("BUD-009")
@cap("truncation")
@pytest.mark.parametrize(
    "estimator", [lambda s: len(s) // 2 + 3, _words], ids=["heavier", "lighter"]
)
async def test_satisfiability_is_measured_with_the_configured_estimator(make_memory, estimator):
    """The empty view is measured with ``token_estimator``, not the default: a heavier one
    refuses a budget the default would fit, a lighter one accepts a budget the default
    would not."""
    empty = canonical_json({"conversation_memory": {"recent_turns": []}})
    least = estimator(empty)
    assert least > 1 and least != default_token_estimator(empty), "check setup"

    def cfg(total: int) -> Any:
        return config(
            "truncation", total_max_tokens=total, summary_max_tokens=1, token_estimator=estimator
        )

    try:
        await make_memory(cfg(least - 1))
    except ValueError:
        pass
    else:
        raise AssertionError(
            f"BUD-009: the configured token_estimator counts the empty view as {least} tokens, "
            f"yet total_max_tokens={least - 1} was accepted (the default estimator counts "
            f"{default_token_estimator(empty)})"
        )
    try:
        await make_memory(cfg(least))
    except ValueError as exc:
        raise AssertionError(
            f"BUD-009: the configured token_estimator counts the empty view as {least} tokens, "
            f"within total_max_tokens={least}, but the memory refused the budget (the default "
            f"estimator counts {default_token_estimator(empty)}): {exc}"
        ) from exc


def _v1_states_over_a_window_of_one() -> list[Any]:
    """The PenguiFlow v1 fixtures with more than one turn in recent, each marked with the
    capability of its strategy."""
    from importlib import resources  # only this check reads the v1 fixtures

    folder = resources.files("stm_conformance") / "data" / "penguiflow_v1"
    params = []
    for path in sorted(folder.iterdir(), key=lambda p: p.name):
        if not path.name.endswith(".json"):
            continue
        state = json.loads(path.read_text(encoding="utf-8"))
        if len(state["turns"]) > 1:
            strategy = state["config_snapshot"]["strategy"]
            params.append(pytest.param(state, id=path.name[:-5], marks=cap(strategy)))
    return params


@scenario("bound:upper")
@req("BUD-003", "SER-004")
@cap("serialization")
@pytest.mark.parametrize("state", _v1_states_over_a_window_of_one())
async def test_a_v1_state_loaded_into_a_smaller_window_is_brought_within_it(make_memory, state):
    """A PenguiFlow v1 state is brought within this memory's window as it loads, as a v2
    state is (``test_a_state_loaded_into_a_smaller_window_evicts_to_pending``): right after
    ``from_dict``, before any ``add_turn``, recent holds the state's newest turn only."""
    summarizer = ScriptedSummarizer()
    summarizer.hold()  # turns the window evicts wait as pending: nothing else moves
    strategy = state["config_snapshot"]["strategy"]
    memory = await make_memory(
        config(strategy, full_zone_turns=1, retry_backoff_base_s=30.0), summarizer=summarizer
    )
    try:
        memory.from_dict(copy.deepcopy(state))
    except ValueError as exc:  # the load itself is SER-004's (its own checks say more)
        raise AssertionError(f"SER-004: a valid v1 state was refused: {exc}") from exc
    ctx = dict(await memory.get_llm_context())
    recent = users(ctx.get("conversation_memory", {}).get("recent_turns"))
    assert len(recent) <= 1, (
        f"BUD-003: a v1 state of {len(state['turns'])} recent turns loaded into "
        f"full_zone_turns=1 shows {len(recent)} recent turns: {recent}"
    )
    newest = state["turns"][-1]["user_message"]
    assert recent == [newest], (
        f"SER-004: after loading a v1 state into full_zone_turns=1 recent is {recent}, not "
        f"the state's newest turn {newest!r}"
    )
    summarizer.release()
