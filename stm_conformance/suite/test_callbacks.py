"""CB — callbacks run once per event, in order, and can never harm the memory."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from importlib import resources
from typing import Any

import pytest

from stm_conformance import RecordingCallbacks, ScriptedSummarizer
from stm_conformance.checks import (
    EITHER_STRATEGY,
    SHORTENING_BUDGET,
    OneSummary,
    config,
    eventually,
    install_one_summary_to_shorten,
    json_state,
    memory_view,
    returns_within,
    turn,
    users,
    view_tokens,
)
from stm_conformance.contract import ConversationTurn, MemoryKey, default_token_estimator
from stm_conformance.fixtures import PreconditionError

pytestmark = [pytest.mark.stm_capability("callbacks")]
req = pytest.mark.stm_requirement


@req("CB-001")
@pytest.mark.parametrize(
    ("strategy", "window"),
    [
        pytest.param("truncation", 2, marks=pytest.mark.stm_capability("truncation")),
        pytest.param("rolling_summary", 2, marks=pytest.mark.stm_capability("rolling_summary")),
        # Every turn evicted the moment it is added: straight to pending, still a turn added.
        pytest.param("rolling_summary", 0, marks=pytest.mark.stm_capability("rolling_summary")),
    ],
)
async def test_turn_added_once_per_turn_in_order(
    make_memory, recording_callbacks, strategy, window
):
    cfg = config(strategy, full_zone_turns=window, **recording_callbacks.config_kwargs())
    summarizer = ScriptedSummarizer()
    summarizer.hold()  # the turns stay where add_turn put them until the flush
    memory = await make_memory(cfg, summarizer=summarizer)
    # A turn equal to the one before it (an agent's "ok" twice) is a turn of its own.
    repeated = [ConversationTurn(user_message="ok", assistant_response="ok") for _ in range(2)]
    turns = [turn(0), *repeated, turn(3), turn(4)]
    users = [t.user_message for t in turns]
    for t in turns:
        await memory.add_turn(t)
    view = await memory_view(memory)
    kept = [t["user"] for t in (*view.get("pending_turns", []), *view["recent_turns"])]
    if strategy == "rolling_summary" and kept != users:
        raise AssertionError(
            f"WM-002: five turns added with full_zone_turns={window} and every call held, "
            f"and the view keeps {kept} (precondition)"
        )
    summarizer.release()
    await memory.flush()
    await recording_callbacks.wait_for("turns", 5)
    await recording_callbacks.settle()
    reported = [t.user_message for t in recording_callbacks.turns]
    assert reported == users, (
        f"CB-001: on_turn_added reported {reported} for the turns {users} (one call per "
        "stored turn, in order, a repeated turn included)"
    )


@req("CB-001")
@pytest.mark.stm_capability("persistence")
@pytest.mark.parametrize("strategy", EITHER_STRATEGY)
async def test_hydrated_turns_are_not_reported_again(
    make_memory, recording_callbacks, stm_provider, stm_store, strategy
):
    """Turns come back from the store, they are not added again: a memory that hydrates a
    conversation (observed by the same callbacks) reports only the turns added after."""
    key = MemoryKey("t", "u", "reported-once")
    storage = stm_provider.key_for_storage(key)
    cfg = config(strategy, full_zone_turns=2, **recording_callbacks.config_kwargs())
    memory = await make_memory(cfg, key=key)
    for i in range(3):
        await memory.add_turn(turn(i))
    await memory.flush()
    await recording_callbacks.wait_for("turns", 3)
    await memory.persist(stm_store, storage)
    restored = await make_memory(cfg, key=key)
    await restored.hydrate(stm_store, storage)
    await restored.add_turn(turn(3))
    await recording_callbacks.wait_for("turns", 4)
    await recording_callbacks.settle()
    reported = [t.user_message for t in recording_callbacks.turns]
    assert reported == [f"u{i}" for i in range(4)], (
        f"CB-001: on_turn_added reported {reported} for turns u0..u2 added, persisted and "
        "hydrated into another memory, then u3 added there: each turn once"
    )


@req("CB-001")
async def test_no_turn_callback_under_strategy_none(make_memory, recording_callbacks):
    """``on_turn_added`` runs once per *stored* turn; strategy ``none`` stores none."""
    memory = await make_memory(config("none", **recording_callbacks.config_kwargs()))
    for i in range(3):
        await memory.add_turn(turn(i))
    await recording_callbacks.settle()
    assert recording_callbacks.turns == [], (
        f"CB-001: on_turn_added ran {len(recording_callbacks.turns)} time(s) under strategy "
        "none, which stores no turn (STR-001)"
    )


@req("CB-001")
@pytest.mark.stm_capability("serialization")
@pytest.mark.parametrize("strategy", EITHER_STRATEGY)
async def test_a_turn_added_just_before_a_load_is_reported(
    make_memory, recording_callbacks, strategy
):
    """A turn added, then a ``from_dict`` before the loop turns: the turn was added, and
    its ``on_turn_added`` runs even though the state it went into was replaced."""
    cfg = config(strategy, full_zone_turns=2, **recording_callbacks.config_kwargs())
    memory = await make_memory(cfg)
    backend = memory._stm_memory  # its own add_turn: the kit's would let the loop turn
    state = json_state(memory)
    await backend.add_turn(turn(0))
    memory.from_dict(state)
    try:
        await recording_callbacks.wait_for("turns", 1, timeout=2)
    except TimeoutError:
        raise AssertionError(
            "CB-001: u0 was added, then the state replaced by from_dict before the loop "
            "turned: its on_turn_added never ran"
        ) from None


@req("CB-002")
@pytest.mark.stm_capability("rolling_summary")
@pytest.mark.stm_capability("serialization")
async def test_the_first_summary_after_a_load_reports_the_loaded_one_as_old(
    make_memory, recording_callbacks
):
    """``old`` is the summary the new one replaces: after a load, the loaded summary, not
    the last one this memory reported."""
    key = MemoryKey("t", "u", "loaded-summary")
    source = await make_memory(config(full_zone_turns=1), key=key, summarizer=ScriptedSummarizer())
    for i in range(3):
        await source.add_turn(turn(i))
    await source.flush()
    loaded = (await memory_view(source))["summary"]
    summarizer = ScriptedSummarizer()
    cfg = config(full_zone_turns=1, **recording_callbacks.config_kwargs())
    memory = await make_memory(cfg, key=key, summarizer=summarizer)
    await memory.add_turn(turn(10))
    await memory.add_turn(turn(11))
    await memory.flush()  # a summary of its own first: u10
    await recording_callbacks.wait_for("summaries", 1)
    memory.from_dict(json_state(source))
    await memory.add_turn(turn(12))
    await memory.flush()
    await recording_callbacks.wait_for("summaries", 2)
    await recording_callbacks.settle()
    old, new = recording_callbacks.summaries[-1]
    assert old == loaded, (
        f"CB-002: the first summary after loading a state whose summary is {loaded!r} "
        f"reported old={old!r}"
    )
    assert new == (await memory_view(memory))["summary"]


async def _a_call_made_stale(
    make_memory: Any, cfg: Any, *, fails: bool
) -> tuple[Any, Callable[[], int]]:
    """A memory whose first call (for u0) is held while ``from_dict`` loads the memory's
    own state, then let go: it answers, or raises if ``fails``; every later call ``n``
    answers ``summary of call n``. The memory, and how many calls were made so far."""
    gate = asyncio.Event()
    calls = 0

    async def summarizer(payload: Any) -> dict[str, str]:
        nonlocal calls
        calls += 1
        number = calls
        if number == 1:
            await gate.wait()
            if fails:
                raise RuntimeError("the replaced state's call fails")
        return {"summary": f"summary of call {number}"}

    memory = await make_memory(cfg, summarizer=summarizer)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 evicted: call 1, held
    await eventually(lambda: calls >= 1, what="WM-002: a call for u0 (precondition)")
    memory.from_dict(json_state(memory))  # call 1 is now the replaced state's
    gate.set()
    return memory, lambda: calls


@req("CB-003")
@pytest.mark.stm_capability("rolling_summary")
@pytest.mark.stm_capability("serialization")
async def test_a_failure_from_dict_made_stale_is_not_reported(make_memory, recording_callbacks):
    """A call in flight when ``from_dict`` replaces the state belongs to the replaced
    state (WM-004): its failure changes the health of no state the memory holds, so
    ``on_health_changed`` reports no transition; the loaded state stays HEALTHY."""
    cfg = config(
        full_zone_turns=1, retry_backoff_base_s=30.0, **recording_callbacks.config_kwargs()
    )
    memory, calls = await _a_call_made_stale(make_memory, cfg, fails=True)
    await eventually(
        lambda: calls() >= 2 or memory.health.value != "healthy",
        what="WM-004: u0, pending in the loaded state, sent to a call of its own (precondition)",
    )
    await recording_callbacks.settle()
    if memory.health.value != "healthy":
        raise PreconditionError(
            f"WM-004: the failure of a call from_dict made stale left the loaded state "
            f"{memory.health.value}"
        )
    assert recording_callbacks.health == [], (
        f"CB-003: on_health_changed reported {recording_callbacks.health} while the memory "
        "stayed HEALTHY: the failed call was the replaced state's, and changed no health"
    )


@req("CB-002")
@pytest.mark.stm_capability("rolling_summary")
@pytest.mark.stm_capability("serialization")
async def test_a_summary_from_dict_made_stale_is_not_reported(make_memory, recording_callbacks):
    """A call in flight when ``from_dict`` replaces the state belongs to the replaced
    state (WM-004): its summary is never installed, so ``on_summary_updated`` never
    reports it. The loaded state's own summary is reported, once."""
    cfg = config(full_zone_turns=1, **recording_callbacks.config_kwargs())
    memory, calls = await _a_call_made_stale(make_memory, cfg, fails=False)
    await returns_within(memory.flush(), what="WM-007: flush() after the load")
    await recording_callbacks.settle()
    if calls() != 2:
        raise PreconditionError(
            f"WM-004: u0, pending in the loaded state, went to {calls() - 1} calls after the "
            f"load, not one"
        )
    installed = (await memory_view(memory)).get("summary")
    assert recording_callbacks.summaries == [("", installed)], (
        f"CB-002: on_summary_updated reported {recording_callbacks.summaries} where the one "
        f"summary installed is {installed!r}; the summary of the call from_dict made stale "
        f"('summary of call 1') was never installed"
    )


@req("CB-002")
@pytest.mark.stm_capability("rolling_summary")
async def test_summary_updated_once_per_summary(
    make_memory, scripted_summarizer, recording_callbacks
):
    cfg = config(full_zone_turns=1, **recording_callbacks.config_kwargs())
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    for i in range(5):
        if i == 2:  # a failed call (then its retry succeeds) installs nothing: no callback
            scripted_summarizer.fail_next(1, mode="raise")
        await memory.add_turn(turn(i))
        await memory.flush()
    assert len(scripted_summarizer.calls) > scripted_summarizer.completed, "no call failed"
    await recording_callbacks.wait_for("summaries", scripted_summarizer.completed)
    await recording_callbacks.settle()
    reported, installed = len(recording_callbacks.summaries), scripted_summarizer.completed
    assert reported == installed, (
        f"on_summary_updated ran {reported} times for {installed} installed summaries "
        f"({len(scripted_summarizer.calls) - installed} failed calls installed nothing)"
    )
    olds = [old for old, _ in recording_callbacks.summaries]
    news = [new for _, new in recording_callbacks.summaries]
    assert olds == ["", *news[:-1]], "old/new must chain"
    assert news[-1] == (await memory_view(memory))["summary"]


@req("CB-002")
@pytest.mark.stm_capability("rolling_summary")
async def test_a_recovery_reports_the_summary_it_replaces(
    make_memory, scripted_summarizer, recording_callbacks
):
    """``old`` is the summary the install replaces, also after a recovery, while the view
    shows none (DEGRADED shows recent turns only)."""
    cfg = config(
        full_zone_turns=1,
        retry_attempts=0,
        degraded_retry_interval_s=0.05,
        **recording_callbacks.config_kwargs(),
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await memory.flush()
    await recording_callbacks.wait_for("summaries", 1)
    first = recording_callbacks.summaries[0][1]
    scripted_summarizer.fail_next(1, mode="raise")
    await memory.add_turn(turn(2))
    await eventually(
        lambda: memory.health.value == "degraded", what="HLT-004: DEGRADED (precondition)"
    )
    # A turn too: a backend that attempts recovery only when a turn comes (HLT-006's fault,
    # checked elsewhere) is still judged on its callbacks here.
    await memory.add_turn(turn(3))
    await eventually(
        lambda: memory.health.value == "healthy", what="HLT-006: recovery (precondition)"
    )
    await recording_callbacks.wait_for("summaries", 2)
    old, new = recording_callbacks.summaries[1]
    # The recovery's: the second successful call (a later one may have run since).
    recovered = [out for out in scripted_summarizer.outputs if out is not None][1]
    assert (old, new) == (first, recovered), (
        f"CB-002: the recovery's summary was reported as replacing {old!r}, not the summary "
        f"installed before it, {first!r}"
    )


@req("CB-002")
@pytest.mark.stm_capability("rolling_summary")
async def test_a_summary_the_budget_shortens_is_not_reported_again(
    make_memory, recording_callbacks
):
    """Under ``truncate_summary`` the budget shortens the installed summary as turns come
    (BUD-005). That installs no summary: ``on_summary_updated`` reports the one summary
    the summarizer made, once, and not each shortening of it."""
    summarizer = OneSummary()
    cfg = config(**SHORTENING_BUDGET, **recording_callbacks.config_kwargs())
    memory = await make_memory(cfg, summarizer=summarizer)
    try:
        view = await install_one_summary_to_shorten(memory)
        installed = view["summary"]
        # The budget the shortening follows is the view's (BUD-008), as for the budget's
        # own checks: one that measures something else trims as it measures.
        measured, spec = memory.estimate_tokens(), view_tokens(cfg, {"conversation_memory": view})
        if measured != spec:
            raise PreconditionError(
                f"BUD-008: estimate_tokens()={measured}, estimator(view)={spec}"
            )
        for i in range(3, 6):
            await memory.add_turn(turn(i, pad=100))
        shortened = (await memory_view(memory)).get("summary") or ""
        if len(shortened) >= len(installed):
            raise PreconditionError(
                f"BUD-005: three turns over the budget left the summary of {len(installed)} "
                f"characters at {len(shortened)}, not shortened"
            )
        await recording_callbacks.wait_for("summaries", 1)
        await recording_callbacks.settle()
        reported = [(len(old), len(new)) for old, new in recording_callbacks.summaries]
        assert reported == [(0, len(installed))], (
            f"CB-002: one summary installed ({len(installed)} characters), then shortened by "
            f"the budget to {len(shortened)}; on_summary_updated reported (old, new) lengths "
            f"{reported}: a shortening installs no summary"
        )
    finally:
        summarizer.release()


@req("CB-002")
@pytest.mark.stm_capability("rolling_summary")
async def test_a_summary_equal_to_the_one_it_replaces_is_reported(make_memory, recording_callbacks):
    """A call that finds nothing new returns the previous summary unchanged: a summary was
    installed all the same (it covers the turns it was sent), so it is reported,
    ``(s, s)``."""

    async def summarizer(payload: Any) -> dict[str, str]:
        return {"summary": payload.get("previous_summary") or "the user said hello"}

    cfg = config(full_zone_turns=1, **recording_callbacks.config_kwargs())
    memory = await make_memory(cfg, summarizer=summarizer)
    for i in range(3):
        await memory.add_turn(turn(i))
        await returns_within(memory.flush(), what="WM-007: flush() with a summarizer that answers")
    await recording_callbacks.wait_for("summaries", 2)
    await recording_callbacks.settle()
    same = "the user said hello"
    assert recording_callbacks.summaries == [("", same), (same, same)], (
        f"CB-002: two summaries installed (the second equal to the first), reported as "
        f"{recording_callbacks.summaries}"
    )


@req("CB-003")
@pytest.mark.stm_capability("rolling_summary")
async def test_health_changes_once_each_in_order(
    make_memory, scripted_summarizer, recording_callbacks
):
    cfg = config(full_zone_turns=1, retry_attempts=2, **recording_callbacks.config_kwargs())
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_always("raise")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await eventually(
        lambda: memory.health.value == "degraded",
        what="HLT-004: DEGRADED once every attempt failed (precondition)",
    )
    await recording_callbacks.wait_for("health", 2)
    await recording_callbacks.settle()
    assert recording_callbacks.health == [("healthy", "retry"), ("retry", "degraded")], (
        "RETRY -> RETRY is not a transition; each transition is reported once, in order"
    )


@req("CB-003")
@pytest.mark.stm_capability("rolling_summary")
async def test_with_no_retries_a_failure_is_one_transition(
    make_memory, scripted_summarizer, recording_callbacks
):
    """With ``retry_attempts=0`` the first failure degrades the memory: HEALTHY ->
    DEGRADED is the one transition, with no RETRY reported on the way."""
    cfg = config(full_zone_turns=1, retry_attempts=0, **recording_callbacks.config_kwargs())
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_always("raise")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await eventually(
        lambda: memory.health.value == "degraded",
        what="HLT-004: DEGRADED once the one attempt failed (precondition)",
    )
    calls = len(scripted_summarizer.calls)
    if calls != 1:  # it did retry: its transitions are HLT-004's to judge
        raise PreconditionError(
            f"HLT-004: with retry_attempts=0 the memory made {calls} calls before DEGRADED, not 1"
        )
    await recording_callbacks.wait_for("health", 1)
    await recording_callbacks.settle()
    assert recording_callbacks.health == [("healthy", "degraded")], (
        f"CB-003: with retry_attempts=0 the health changes reported are "
        f"{recording_callbacks.health}, not the one transition [('healthy', 'degraded')]"
    )


@req("CB-003")
@pytest.mark.stm_capability("rolling_summary")
async def test_health_changes_queued_behind_a_slow_callback_keep_their_order(
    make_memory, scripted_summarizer
):
    """The callback takes longer than the transitions take to come (a failure, DEGRADED,
    recovery attempts that fail, a few loop turns apart), so transitions queue behind it:
    each is still reported once, oldest first, each from the health the one before went
    to."""
    slow = RecordingCallbacks(delay_s=0.1)
    cfg = config(
        full_zone_turns=1,
        retry_attempts=1,
        retry_backoff_base_s=0.01,
        degraded_retry_interval_s=0.01,
        on_health_changed=slow.on_health_changed,
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_always("raise")
    scripted_summarizer.hold()
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 evicted: the first call, held
    # The first call, retry 1 (RETRY), then recovery attempts (RECOVERING), each failing:
    # HEALTHY -> RETRY -> DEGRADED -> RECOVERING -> DEGRADED -> RECOVERING.
    for calls, health, rule in ((1, "healthy", "WM-002"), (2, "retry", "HLT-002"),
                                (3, "recovering", "HLT-006")):  # fmt: skip
        try:
            await scripted_summarizer.wait_for_calls(calls)
        except TimeoutError:
            raise AssertionError(f"{rule}: no call {calls} by itself (precondition)") from None
        await eventually(
            lambda: memory.health.value == health,  # noqa: B023 - awaited in this iteration
            what=f"HLT-004: with retry_attempts=1, call {calls} runs in {health} (precondition)",
        )
        scripted_summarizer.let_one_through()
    await slow.wait_for("health", 5)
    chain = slow.health[:5]
    want_from = "healthy"
    for old, new in chain:
        assert old == want_from and old != new, (
            f"CB-003: transitions reported {chain}: each once, in the order they happened, "
            f"each from the health the one before it went to"
        )
        want_from = new
    scripted_summarizer.release()


@req("CB-003")
@pytest.mark.stm_capability("rolling_summary")
@pytest.mark.parametrize(
    "via",
    [
        pytest.param("from_dict", marks=pytest.mark.stm_capability("serialization")),
        pytest.param("hydrate", marks=pytest.mark.stm_capability("persistence")),
    ],
)
async def test_a_load_is_not_a_health_transition(
    make_memory, scripted_summarizer, recording_callbacks, stm_provider, stm_store, via
):
    """``from_dict`` of a DEGRADED state into a HEALTHY memory changes what ``health``
    reads, but no transition happened: the state degraded where it was written, and was
    reported there. The loaded memory then recovers, and its first callback is DEGRADED ->
    RECOVERING: one for the load would come before it (callbacks keep the order of the
    transitions). The state is PenguiFlow's version 1 format (SER-004)."""
    folder = resources.files("stm_conformance") / "data" / "penguiflow_v1"
    state = json.loads((folder / "rolling_summary_degraded.json").read_text(encoding="utf-8"))
    cfg = config(
        full_zone_turns=2,
        retry_attempts=0,
        recovery_backlog_limit=3,
        degraded_retry_interval_s=0.05,
        **recording_callbacks.config_kwargs(),
    )
    key = MemoryKey("t", "u", f"loaded-degraded-{via}")
    memory = await make_memory(cfg, key=key, summarizer=scripted_summarizer)
    try:
        if via == "from_dict":
            memory.from_dict(state)
        else:  # a v1 record, as PenguiFlow persisted it (SER-004)
            await stm_store.save_memory_state(stm_provider.key_for_storage(key), state)
            await memory.hydrate(stm_store, stm_provider.key_for_storage(key))
    except Exception as exc:
        raise AssertionError(f"SER-004: a DEGRADED v1 state did not load: {exc!r}") from exc
    assert memory.health.value == "degraded", (
        f"SER-004: a DEGRADED v1 state loaded as {memory.health.value!r} (precondition)"
    )
    # A turn too: a backend that attempts recovery only when a turn comes (HLT-006's
    # fault, checked elsewhere) is still judged on its callbacks here.
    await memory.add_turn(turn(0))
    await eventually(
        lambda: memory.health.value == "healthy",
        what="HLT-006: the loaded DEGRADED memory recovers (precondition)",
    )
    await recording_callbacks.wait_for("health", 2)
    await recording_callbacks.settle()
    assert recording_callbacks.health == [("degraded", "recovering"), ("recovering", "healthy")], (
        f"CB-003: a {via} is not a transition of the summarizer's health: only the "
        f"recovery after it is reported; on_health_changed got {recording_callbacks.health}"
    )


@req("CB-004")
@pytest.mark.parametrize("strategy", EITHER_STRATEGY)
@pytest.mark.parametrize("raises", ["error", "cancelled"])
async def test_a_raising_callback_loses_no_event_queued_behind_it(make_memory, strategy, raises):
    """Five turns added with no turn of the event loop between them, so their events queue
    up behind an ``on_turn_added`` that raises (an error, or a ``CancelledError`` of its
    own, nothing having cancelled it): every one is still delivered, in order."""
    raising = (
        RecordingCallbacks(raise_errors=True)
        if raises == "error"
        else RecordingCallbacks(raise_cancelled=True)
    )
    cfg = config(strategy, full_zone_turns=2, **raising.config_kwargs())
    memory = await make_memory(cfg)
    backend = memory._stm_memory  # its own add_turn: the kit's would let the loop turn
    for i in range(5):
        try:
            await backend.add_turn(turn(i))
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the check itself is cancelled
            # Raised on, it would end the check as cancelled and the test runner with it.
            raise AssertionError(
                "CB-004: the CancelledError a callback raised reached add_turn's caller"
            ) from None
    try:
        await raising.wait_for("turns", 5)
    except TimeoutError:
        got = [t.user_message for t in raising.turns]
        raise AssertionError(
            f"CB-004: on_turn_added raised, and only {got} of 5 turns queued behind it were "
            "delivered: a raising callback must not stop the events after it"
        ) from None
    got = [t.user_message for t in raising.turns]
    assert got == [f"u{i}" for i in range(5)], f"CB-001: on_turn_added received {got}"


@req("CB-004")
@pytest.mark.stm_capability("truncation")
async def test_slow_or_raising_callbacks_never_harm_memory(make_memory):
    slow = RecordingCallbacks(delay_s=30.0)
    cfg = config("truncation", full_zone_turns=2, **slow.config_kwargs())
    memory = await make_memory(cfg)

    async def three_turns() -> None:
        for i in range(3):
            await memory.add_turn(turn(i))

    await returns_within(
        three_turns(), timeout=1, what="CB-004: three add_turn calls while callbacks take 30s"
    )
    raising = RecordingCallbacks(raise_errors=True)
    cfg = config("truncation", full_zone_turns=2, **raising.config_kwargs())
    memory = await make_memory(cfg)
    for i in range(3):
        await memory.add_turn(turn(i))
    await raising.wait_for("turns", 3)
    await raising.settle()
    assert len((await memory_view(memory))["recent_turns"]) == 2


@req("CB-004")
@pytest.mark.stm_capability("persistence")
@pytest.mark.parametrize("strategy", EITHER_STRATEGY)
async def test_slow_callbacks_never_delay_persist_or_hydrate(
    make_memory, stm_provider, stm_store, strategy
):
    """A save or a load is no reason to wait for the callbacks' queue: with
    ``on_turn_added`` taking 30 s a turn, ``persist`` and ``hydrate`` return at once."""
    key = MemoryKey("t", "u", "slow-callbacks-persist")
    storage = stm_provider.key_for_storage(key)
    slow = RecordingCallbacks(delay_s=30.0)
    cfg = config(strategy, full_zone_turns=2, **slow.config_kwargs())
    memory = await make_memory(cfg, key=key)
    for i in range(2):
        await memory.add_turn(turn(i))
    await returns_within(
        memory.persist(stm_store, storage),
        timeout=1,
        what="CB-004: persist while on_turn_added takes 30s a turn",
    )
    await returns_within(
        memory.hydrate(stm_store, storage),
        timeout=1,
        what="CB-004: hydrate while on_turn_added takes 30s a turn",
    )


@req("CB-004")
@pytest.mark.stm_capability("rolling_summary")
async def test_slow_summary_and_health_callbacks_never_delay_flush(
    make_memory, scripted_summarizer
):
    """``on_summary_updated`` and ``on_health_changed`` run while the memory summarizes:
    taking 30s each, they delay neither ``add_turn`` nor ``flush()``."""

    async def turns_and_flushes(callbacks: RecordingCallbacks, summarizer: Any) -> None:
        # A backoff long enough that only a timer of the memory's own retries the call:
        # with a shorter one, a backend that retries only when called next (HLT-002) would
        # pass or fail the two runs below by chance, as its process is scheduled.
        cfg = config(full_zone_turns=1, retry_backoff_base_s=0.05, **callbacks.config_kwargs())
        memory = await make_memory(cfg, summarizer=summarizer)
        summarizer.fail_next(1, mode="raise")  # health changes too: to RETRY and back
        for i in range(4):
            await memory.add_turn(turn(i))
            await memory.flush()
        # And to DEGRADED, where a flush returns at once: not once the callback is done.
        degrading = config(full_zone_turns=1, retry_attempts=0, **callbacks.config_kwargs())
        memory = await make_memory(degrading, summarizer=summarizer)
        summarizer.fail_next(1, mode="raise")
        for i in range(2):
            await memory.add_turn(turn(i))
        await memory.flush()

    # The same with callbacks that return at once: what it takes without them to wait
    # for (a retry that waits for the next add_turn is HLT-002's, not the callbacks').
    await returns_within(
        turns_and_flushes(RecordingCallbacks(), ScriptedSummarizer()),
        timeout=2,
        what="HLT-002: four add_turn and flush() calls, one failed summarizer call retried, "
        "then a memory degraded (precondition, with callbacks that return at once)",
    )
    slow = RecordingCallbacks(delay_s=30.0)
    await returns_within(
        turns_and_flushes(slow, scripted_summarizer),
        timeout=2,
        what="CB-004: four add_turn and flush() calls, and a flush() of a degraded memory, "
        "while summary and health callbacks take 30s each",
    )
    # The slow callbacks did run: what flush() returned without waiting for.
    for attr, rule in (("summaries", "CB-002"), ("health", "CB-003")):
        try:
            await slow.wait_for(attr, 1)
        except TimeoutError as exc:
            raise AssertionError(f"{rule}: {exc} (precondition)") from exc


@req("CB-001")
@pytest.mark.stm_capability("truncation")
async def test_a_turn_stored_while_the_estimator_raises_is_reported_once(make_memory):
    """The configured ``token_estimator`` raising while a turn is added: a memory may store
    the turn (and raise), or refuse it, but it reports what it stored, each turn once and
    in order."""
    failing = False

    def estimator(text: str) -> int:
        if failing:
            raise RuntimeError("the estimator's service is down")
        return default_token_estimator(text)

    reported: list[str] = []

    async def on_turn_added(t: Any) -> None:
        reported.append(t.user_message)

    cfg = config(
        "truncation",
        full_zone_turns=5,
        total_max_tokens=100_000,
        token_estimator=estimator,
        on_turn_added=on_turn_added,
    )
    memory = await make_memory(cfg)
    if memory.health.value != "healthy":  # a raising add_turn is judged as HLT-008's then
        raise PreconditionError(f"HLT-001: a new truncation memory is {memory.health.value}")
    await memory.add_turn(turn(0))
    failing = True
    try:
        await memory.add_turn(turn(1))
    except Exception:
        pass
    finally:
        failing = False
    await memory.add_turn(turn(2))
    shown = users((await memory_view(memory)).get("recent_turns"))
    if shown not in (["u0", "u1", "u2"], ["u0", "u2"]):
        raise PreconditionError(f"STR-002: three turns added under truncation show {shown}")
    # Delivered in order: once the last turn is reported, every one before it was.
    await eventually(lambda: "u2" in reported, what="CB-001: the last turn reported")
    await asyncio.sleep(0.02)  # a duplicate would come by now
    assert reported == shown, (
        f"CB-001: the estimator raised while u1 was added; the memory holds {shown} but "
        f"on_turn_added reported {reported}: a stored turn is reported once, whatever the "
        f"estimator did"
    )
