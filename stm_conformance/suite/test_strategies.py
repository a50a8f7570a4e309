"""STR — the three strategies and the shape of the view."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from stm_conformance.checks import (
    HIDING_BUDGET,
    canonical_json,
    config,
    hide_every_pending_turn,
    memory_view,
    state_text,
    turn,
    turn_json,
    users,
)
from stm_conformance.contract import ConversationTurn, default_token_estimator

req = pytest.mark.stm_requirement
scenario = pytest.mark.stm_scenario
cap = pytest.mark.stm_capability


@req("STR-001")
async def test_none_strategy_is_a_no_op(make_memory):
    memory = await make_memory(config("none"))
    saved = state_text(memory) if hasattr(memory, "to_dict") else None
    for i in range(3):
        await memory.add_turn(turn(i))
    if saved is not None:
        assert state_text(memory) == saved, (
            "STR-001: strategy none's add_turn stores nothing, but to_dict() changed"
        )
    context = await memory.get_llm_context()
    assert dict(context) == {}
    assert memory.estimate_tokens() == default_token_estimator("{}")
    # The caller's to change: merged into an llm_context, a view shared between calls (or
    # memories) would carry one caller's changes into the next view.
    if isinstance(context, dict):
        context["conversation_memory"] = {"summary": "the caller's"}
    assert dict(await memory.get_llm_context()) == {}, (
        "STR-001: a view changed by its caller changed the next view"
    )


@req("STR-001")
@pytest.mark.parametrize("policy", ["truncate_oldest", "truncate_summary", "error"])
async def test_none_strategy_is_a_no_op_under_any_budget(make_memory, policy):
    """A turn far over ``total_max_tokens`` changes nothing under ``none``, whatever the
    overflow policy: nothing is stored, so nothing is measured (and ``{}`` fits any budget
    a memory accepts, BUD-009). ``error`` refuses a turn the view could not take; ``none``'s
    view takes none."""
    cfg = config("none", total_max_tokens=20, summary_max_tokens=10, overflow_policy=policy)
    memory = await make_memory(cfg)
    for t in (turn(0, pad=200), turn(1), ConversationTurn("", "")):
        try:
            await memory.add_turn(t)
        except Exception as exc:
            raise AssertionError(
                f"STR-001: strategy none's add_turn raised {type(exc).__name__}: {exc} for a "
                f"turn of {len(t.user_message) + len(t.assistant_response)} characters under "
                f"overflow_policy={policy!r} and total_max_tokens=20; it stores nothing"
            ) from exc
    assert dict(await memory.get_llm_context()) == {}, "STR-001: strategy none showed a turn"


@req("HLT-001")
@pytest.mark.parametrize("strategy", ["none", pytest.param("truncation", marks=cap("truncation"))])
async def test_a_memory_without_a_summarizer_is_healthy(make_memory, strategy):
    """No summarizer is not a summarizer unavailable: a new ``none`` or ``truncation``
    memory is HEALTHY, as a ``rolling_summary`` one is."""
    memory = await make_memory(config(strategy, full_zone_turns=2))
    health = memory.health
    assert isinstance(health, str) and health.value == "healthy", (
        f"HLT-001: a new {strategy} memory's health is {health!r}"
    )


@req("STR-001")
async def test_none_strategy_measures_its_view_with_the_configured_estimator(make_memory):
    """``none`` shows ``{}``; ``estimate_tokens()`` is the configured estimator on it, not
    the default's count (nor a constant)."""

    def heavy(text: str) -> int:
        return len(text) // 2 + 3

    memory = await make_memory(config("none", token_estimator=heavy))
    await memory.add_turn(turn(0))
    tokens = memory.estimate_tokens()
    assert tokens == heavy("{}") != default_token_estimator("{}"), (
        f"STR-001: strategy none's estimate_tokens() is {tokens}; the configured estimator "
        f"counts its view {{}} as {heavy('{}')}"
    )


@req("STR-002", "BUD-003")
@cap("truncation")
@pytest.mark.parametrize("window", [0, 1, 3])
async def test_truncation_shows_exactly_the_last_window(make_memory, window):
    """The window is the turns added last, whatever their timestamps say (``ts`` out of
    order, equal, zero): a backend that orders turns by ``ts`` shows other turns."""
    memory = await make_memory(config("truncation", full_zone_turns=window))
    stamps = [100.0, 50.0, 200.0, 200.0, 0.0, 7.5]
    for n in range(1, 7):
        await memory.add_turn(dataclasses.replace(turn(n), ts=stamps[n - 1]))
        ctx = dict(await memory.get_llm_context())
        assert set(ctx) == {"conversation_memory"}, ctx
        view = ctx["conversation_memory"]
        assert set(view) == {"recent_turns"}, f"truncation view has extra keys: {view}"
        expected = [f"u{i}" for i in range(max(1, n - window + 1), n + 1)] if window else []
        assert users(view["recent_turns"]) == expected, f"after {n} turns"


@req("STR-002")
@cap("truncation")
async def test_truncation_shows_long_turns_whole(make_memory):
    """With no token limit a turn is shown as it was added, however long: 12,000
    characters of non-ASCII text in the message and the answer, not clipped."""
    memory = await make_memory(config("truncation", full_zone_turns=2, total_max_tokens=0))
    long = ConversationTurn(user_message="ü🦜" * 6_000, assistant_response="é\n" * 6_000)
    await memory.add_turn(turn(0))
    await memory.add_turn(long)
    shown = (await memory_view(memory))["recent_turns"]
    assert shown[-1] == turn_json(long), (
        f"STR-002: a turn of {len(long.user_message)} and {len(long.assistant_response)} "
        f"characters is shown as {len(shown[-1].get('user', ''))} and "
        f"{len(shown[-1].get('assistant', ''))}: the window shows the turns added, whole"
    )


@scenario("text:empty")
@req("STR-002")
@cap("truncation")
async def test_truncation_keeps_empty_and_repeated_turns(make_memory):
    """Every turn added is a turn of the window, also one whose message and answer are
    empty or whitespace, one equal to the turn before, or the very object added before
    (without a turn id): a backend that skips "empty" turns or collapses repeats shows
    older turns instead."""
    memory = await make_memory(config("truncation", full_zone_turns=3))
    added: list[dict[str, str]] = []
    again = ConversationTurn(user_message="q7", assistant_response="a7")
    for t in [
        *(ConversationTurn(user_message=user, assistant_response=assistant) for user, assistant in [
            ("q0", "a0"), ("q1", "a1"), ("", ""), (" ", "\n"), ("q1", "a1"), ("q1", "a1"),
            ("", "a6"),
        ]),
        again, again, again,
    ]:  # fmt: skip
        await memory.add_turn(t)
        added.append({"user": t.user_message, "assistant": t.assistant_response})
        shown = (await memory_view(memory))["recent_turns"]
        assert shown == added[-3:], (
            f"STR-002: after adding {added[-1]!r} the window shows {shown}, not the last 3 "
            f"turns added: {added[-3:]}"
        )


@req("STR-003")
@cap("rolling_summary")
async def test_rolling_summary_view_shape(make_memory, scripted_summarizer):
    memory = await make_memory(config(full_zone_turns=1), summarizer=scripted_summarizer)
    view = await memory_view(memory)
    assert view == {"recent_turns": []}, f"empty rolling view: {view}"
    scripted_summarizer.hold()
    for i in range(3):
        await memory.add_turn(turn(i))
    view = await memory_view(memory)
    assert set(view) == {"pending_turns", "recent_turns"}, view
    scripted_summarizer.release()
    await memory.flush()
    view = await memory_view(memory)
    assert set(view) == {"summary", "recent_turns"}, view
    assert isinstance(view["summary"], str) and view["summary"]


@req("STR-003")
@cap("rolling_summary")
async def test_no_pending_key_when_the_budget_hides_every_pending_turn(
    make_memory, scripted_summarizer
):
    """``pending_turns`` is present only when a pending turn is visible: with turns pending
    but all hidden by the budget, the view has no such key (not an empty list)."""
    memory = await make_memory(config(**HIDING_BUDGET), summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    await hide_every_pending_turn(memory)
    # u0 and u1 are pending (WM-002): every call is held, so no summary covers them.
    view = await memory_view(memory)
    assert set(view) == {"recent_turns"}, (
        f"STR-003: turns are pending but none is visible, so the view holds recent turns "
        f"only: keys {sorted(view)}, pending_turns={view.get('pending_turns')!r}"
    )
    scripted_summarizer.release()


@req("STR-004")
@cap("truncation")
@pytest.mark.parametrize("include", [True, False])
async def test_turn_rendering_and_digest(make_memory, include):
    memory = await make_memory(
        config("truncation", full_zone_turns=2, include_trajectory_digest=include)
    )
    turns = [turn(1, digest=True), turn(2)]
    for t in turns:
        await memory.add_turn(t)
    view = await memory_view(memory)
    expected = [turn_json(t, include_digest=include) for t in turns]
    assert view["recent_turns"] == expected
    assert canonical_json(view["recent_turns"]) == canonical_json(expected)


def _scribble(value: Any) -> None:
    """Change everything mutable in ``value`` in place: what a caller merging the view into
    its prompt, or editing it, may do."""
    if isinstance(value, dict):
        for key in list(value):
            if isinstance(value[key], dict | list):
                _scribble(value[key])
            else:
                value[key] = "changed by the caller"
        value["added by the caller"] = True
    elif isinstance(value, list):
        for item in value:
            _scribble(item)
        value.append("added by the caller")


@pytest.mark.parametrize(
    "strategy",
    # Each strategy's view is its own requirement's: truncation's STR-002's.
    [
        pytest.param(name, marks=[pytest.mark.stm_capability(name), req("STR-004", view)])
        for name, view in (("truncation", "STR-002"), ("rolling_summary", "STR-003"))
    ],
)
async def test_a_view_changed_by_its_caller_changes_nothing_of_the_memory(
    make_memory, scripted_summarizer, stm_capabilities, strategy
):
    """The view is the caller's: changed in place, every list and mapping in it down to a
    digest's ``tools_invoked``, it changes neither the next view nor ``estimate_tokens()``
    (nor ``to_dict()``). A backend that hands out its own lists, or the turns it renders
    from, is changed by its callers."""
    memory = await make_memory(config(strategy, full_zone_turns=2), summarizer=scripted_summarizer)
    for i in range(4):  # two recent turns; under rolling_summary a summary of u0 and u1
        await memory.add_turn(turn(i, digest=True))
    await memory.flush()  # nothing in flight: the views below differ only by the caller
    if strategy == "rolling_summary":
        scripted_summarizer.hold()  # u2 stays pending, its call held
        await memory.add_turn(turn(4, digest=True))
    before = canonical_json(dict(await memory.get_llm_context()))
    tokens = memory.estimate_tokens()
    state = state_text(memory) if "serialization" in stm_capabilities else None
    _scribble(dict(await memory.get_llm_context()))
    _scribble(await memory.get_llm_context())
    after = canonical_json(dict(await memory.get_llm_context()))
    assert after == before, (
        f"STR-004: a view its caller changed in place changed the memory's next view: "
        f"{after[:300]}, not {before[:300]}"
    )
    assert memory.estimate_tokens() == tokens, (
        "STR-004: the caller's change moved estimate_tokens()"
    )
    if state is not None:
        assert state_text(memory) == state, "STR-004: the caller's change reached to_dict()"
    scripted_summarizer.release()
