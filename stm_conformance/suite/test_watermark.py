"""WM — the watermark: no turn is forgotten between eviction and summary."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anyio
import pytest

from stm_conformance import ScriptedSummarizer
from stm_conformance.checks import (
    HIDING_BUDGET,
    config,
    eventually,
    hide_every_pending_turn,
    json_state,
    memory_view,
    patient,
    returns_within,
    summary_or_failure,
    turn,
    users,
)
from stm_conformance.contract import ConversationTurn, MemoryKey
from stm_conformance.fixtures import ADD_TURN_LIMIT_S, PreconditionError

pytestmark = [pytest.mark.stm_capability("rolling_summary")]
req = pytest.mark.stm_requirement
scenario = pytest.mark.stm_scenario


class GatedSummarizer:
    """Each call waits for its own gate; records exactly what it was sent."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.gates: list[asyncio.Event] = []
        self.open_all = False

    async def __call__(self, payload: Any) -> dict[str, str]:
        self.calls.append(
            {
                "previous_summary": payload["previous_summary"],
                "turns": [dict(t) for t in payload["turns"]],
            }
        )
        gate = asyncio.Event()
        self.gates.append(gate)
        if not self.open_all:
            await gate.wait()
        line = ",".join(t["user"] for t in payload["turns"])
        return {"summary": (payload["previous_summary"] + "|" + line).strip("|")}

    def release(self, index: int) -> None:
        self.gates[index].set()

    def release_all(self) -> None:
        self.open_all = True
        for gate in self.gates:
            gate.set()


@scenario("bound:upper")
@req("WM-001")
async def test_add_turn_does_not_wait_for_the_summarizer(make_memory, scripted_summarizer):
    memory = await make_memory(config(full_zone_turns=1), summarizer=scripted_summarizer)
    scripted_summarizer.hold()

    async def six_turns() -> None:
        for i in range(6):
            await memory.add_turn(turn(i))

    await returns_within(
        six_turns(), timeout=1, what="WM-001: six add_turn calls while a summarizer call is held"
    )
    await scripted_summarizer.wait_for_calls(1)
    assert scripted_summarizer.completed == 0, "the held call completed"
    scripted_summarizer.release()


@req("WM-002", "WM-005")
@pytest.mark.parametrize("window", [0, 1, 2])
async def test_evicted_turns_are_pending_until_summarized(make_memory, scripted_summarizer, window):
    """With no window at all (``full_zone_turns=0``) every turn is pending at once."""
    memory = await make_memory(config(full_zone_turns=window), summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    for i in range(5):
        await memory.add_turn(turn(i))
    view = await memory_view(memory)
    everything = [f"u{i}" for i in range(5)]
    assert users(view.get("pending_turns")) == everything[: 5 - window], view
    assert users(view.get("recent_turns")) == everything[5 - window :], view
    scripted_summarizer.release()


@scenario("text:empty")
@req("WM-002")
async def test_empty_and_repeated_turns_evicted_are_pending(make_memory, scripted_summarizer):
    """An evicted turn is pending whatever it holds: one whose message and answer are empty
    or whitespace, or one equal to the turn before, is not "nothing to summarize"."""
    memory = await make_memory(config(full_zone_turns=1), summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    added: list[dict[str, str]] = []
    for user, assistant in [
        ("q0", "a0"), ("", ""), (" ", "\n"), ("q0", "a0"), ("q0", "a0"), ("", "a5"), ("q6", ""),
    ]:  # fmt: skip
        await memory.add_turn(ConversationTurn(user_message=user, assistant_response=assistant))
        added.append({"user": user, "assistant": assistant})
        view = await memory_view(memory)
        assert view.get("recent_turns") == added[-1:], (
            f"STR-002: after adding {added[-1]!r} the window shows {view.get('recent_turns')}"
        )
        assert view.get("pending_turns", []) == added[:-1], (
            f"WM-002: after adding {added[-1]!r} pending shows {view.get('pending_turns')}, "
            f"not every turn evicted so far: {added[:-1]}"
        )
    scripted_summarizer.release()


@scenario("text:empty")
@req("WM-004")
async def test_empty_and_repeated_turns_are_sent_to_the_summarizer(
    make_memory, scripted_summarizer
):
    """Each evicted turn reaches one successful call, whatever it holds: a summary that
    covers a turn its call was never sent (an empty one, left out as "nothing to say")
    is not a summary of that turn."""
    memory = await make_memory(config(full_zone_turns=1), summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    # Repeats of a later turn than the held call's (an install that removes the turns equal
    # to one it was sent, unsent, is WM-003's case).
    added = [
        ("q0", "a0"), ("", ""), (" ", "\n"), ("q3", "a3"), ("q3", "a3"), ("", "a5"), ("q6", ""),
    ]  # fmt: skip
    for user, assistant in added:
        await memory.add_turn(ConversationTurn(user_message=user, assistant_response=assistant))
    view = await memory_view(memory)
    pending = [(t.get("user"), t.get("assistant")) for t in view.get("pending_turns", [])]
    if pending != added[:-1]:
        raise PreconditionError(
            f"WM-002: pending shows {pending} with the calls held, not every turn evicted: "
            f"{added[:-1]}"
        )
    scripted_summarizer.let_one_through()  # the held call, sent q0 alone, lands first
    view = await summary_or_failure(memory)
    pending = [(t.get("user"), t.get("assistant")) for t in view.get("pending_turns", [])]
    if pending != added[1:-1]:
        raise PreconditionError(
            f"WM-003: once the call sent q0 alone installed its summary, pending shows "
            f"{pending}, not the turns evicted while it ran: {added[1:-1]}"
        )
    scripted_summarizer.release()
    await returns_within(memory.flush(), what="WM-007: flush() with every call succeeding")
    left = (await memory_view(memory)).get("pending_turns")
    if left:
        raise PreconditionError(f"WM-007: flush() returned with {left} pending")
    sent = [
        (t.get("user"), t.get("assistant"))
        for call, output in zip(scripted_summarizer.calls, scripted_summarizer.outputs, strict=True)
        if output is not None
        for t in call["turns"]
    ]
    assert sent == added[:-1], (
        f"WM-004: the successful calls were sent {sent}; the turns evicted, each once and in "
        f"order, are {added[:-1]}"
    )


@req("WM-004")
@pytest.mark.stm_capability("serialization")
async def test_the_first_call_after_a_load_in_retry_is_the_loaded_state_s(
    make_memory, scripted_summarizer
):
    """A failed call's turns are sent again, but a ``from_dict`` during the backoff
    replaces them: the next call is the loaded state's, sent its summary as
    ``previous_summary`` and its own pending turns, never the replaced state's batch."""
    key = MemoryKey("t", "u", f"retry-then-load-{time.monotonic_ns()}")
    other = await make_memory(config(full_zone_turns=1), key=key, summarizer=ScriptedSummarizer())
    for i in (10, 11, 12):
        await other.add_turn(turn(i))
    await returns_within(other.flush(), what="WM-007: flush() with every call succeeding")
    loaded, loaded_summary = json_state(other), (await memory_view(other)).get("summary")
    if not loaded_summary:
        raise PreconditionError("WM-003: u10 and u11 flushed, and no summary installed")
    cfg = config(full_zone_turns=1, retry_attempts=5, retry_backoff_base_s=0.3)
    memory = await make_memory(cfg, key=key, summarizer=scripted_summarizer)
    scripted_summarizer.fail_next(1, "raise")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 evicted: its call fails
    await eventually(
        lambda: memory.health.value == "retry",
        what="HLT-002: RETRY after a failed call (precondition)",
    )
    made = len(scripted_summarizer.calls)
    memory.from_dict(loaded)  # in the backoff: the retry of u0 belongs to the replaced state
    await memory.add_turn(turn(13))  # u12 evicted: pending in the loaded state
    await returns_within(memory.flush(), what="WM-007: flush() of the loaded state")
    first = scripted_summarizer.calls[made]
    sent = users(first["turns"])
    assert first["previous_summary"] == loaded_summary and set(sent) <= {"u12"}, (
        f"WM-004: the first call after loading was sent {sent} with previous_summary "
        f"{first['previous_summary']!r}; the loaded state holds u12 pending and the summary "
        f"{loaded_summary!r} (u0 was the replaced state's)"
    )


@req("WM-003")
async def test_turns_evicted_during_a_call_stay_pending(make_memory):
    summarizer = GatedSummarizer()
    memory = await make_memory(config(full_zone_turns=1), summarizer=summarizer)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # evicts u0: call 1 starts with [u0]
    await eventually(lambda: len(summarizer.calls) == 1, what="first summarizer call")
    await memory.add_turn(turn(2))  # evicts u1 while call 1 runs
    await memory.add_turn(turn(3))  # evicts u2
    summarizer.release(0)
    await eventually(lambda: len(summarizer.calls) == 2, what="second summarizer call")
    view = await memory_view(memory)
    assert view.get("summary") == "u0", f"call 1 covered only u0: {view}"
    assert users(view.get("pending_turns")) == ["u1", "u2"], (
        f"turns evicted while call 1 ran must stay pending: {view}"
    )
    # Call 2 was sent two turns: its install removes both, the last one too, and keeps u3.
    sent = users(summarizer.calls[1]["turns"])
    await memory.add_turn(turn(4))  # evicts u3 while call 2 runs
    summarizer.release(1)
    await eventually(lambda: len(summarizer.calls) == 3, what="third summarizer call")
    view = await memory_view(memory)
    assert view.get("summary") == "u0|u1,u2", f"call 2 covered {sent}: {view}"
    assert users(summarizer.calls[2]["turns"]) == ["u3"], (
        f"WM-003: call 2 was sent {sent}; the next call must be sent only u3, evicted while "
        f"it ran, not {users(summarizer.calls[2]['turns'])}"
    )
    assert users(view.get("pending_turns")) == ["u3"], (
        f"WM-003: the summary of {sent} must remove exactly those from pending: {view}"
    )
    summarizer.release_all()
    await memory.flush()


@req("WM-003")
@pytest.mark.parametrize("again", ["equal", "same-object"])
async def test_a_turn_equal_to_one_sent_evicted_during_the_call_stays_pending(make_memory, again):
    """The same turn added again (a repeated "ok", the same timestamp; or the very same
    object, re-recorded by a retried request) while the call for the first runs is another
    turn: the install removes the turn sent, not its twin."""
    summarizer = GatedSummarizer()
    memory = await make_memory(config(full_zone_turns=1), summarizer=summarizer)
    first = turn(0)
    await memory.add_turn(first)
    await memory.add_turn(turn(1))  # u0 evicted: call 1 is sent [u0]
    await eventually(lambda: len(summarizer.calls) == 1, what="first summarizer call")
    await memory.add_turn(first if again == "same-object" else turn(0))  # evicts u1
    await memory.add_turn(turn(2))  # evicts the second u0 while call 1 runs
    summarizer.release(0)
    await eventually(lambda: len(summarizer.calls) == 2, what="second summarizer call")
    pending = users((await memory_view(memory)).get("pending_turns"))
    assert pending == ["u1", "u0"], (
        f"WM-003: call 1 was sent the first u0; its install must leave u1 and the second u0, "
        f"evicted while it ran, pending: {pending}"
    )
    summarizer.release_all()
    await memory.flush()


@req("WM-003")
async def test_turns_evicted_while_a_summary_is_installed_stay_pending(
    make_memory, scripted_summarizer
):
    """Turns keep coming, a turn of the event loop or two apart, while the first call's
    summary comes back and is installed: whenever each lands, it is covered by a later call
    or still recent, never lost with the turns the summary covers (an install that awaits
    anything between taking the pending turns and writing the rest back loses them)."""
    memory = await make_memory(config(full_zone_turns=1), summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # evicts u0: call 1 starts with [u0]
    await scripted_summarizer.wait_for_calls(1)
    scripted_summarizer.release()
    for i in range(2, 30):
        await memory.add_turn(turn(i))
        await asyncio.sleep(0)
    # Before flush(), which would wait for lost turns for good: each turn is sent, pending
    # or recent (no token limit hides any).
    lost: list[int] = []
    for _ in range(20):
        view = await memory_view(memory)
        sent = [u for call in scripted_summarizer.calls for u in users(call["turns"])]
        held = sent + users(view.get("pending_turns")) + users(view["recent_turns"])
        lost = sorted(set(range(30)) - {int(u[1:]) for u in held})
        if not lost:
            break
        await asyncio.sleep(0.01)
    assert not lost, (
        f"WM-003: turns {[f'u{i}' for i in lost]}, evicted while a summary came back and was "
        "installed, are neither pending nor recent nor sent to a call"
    )
    await memory.flush()


@req("WM-004")
async def test_each_turn_reaches_one_successful_call_in_order(make_memory, scripted_summarizer):
    memory = await make_memory(config(full_zone_turns=2), summarizer=scripted_summarizer)
    scripted_summarizer.fail_next(2, mode="raise")
    for i in range(12):
        await memory.add_turn(turn(i))
        if i % 3 == 0:
            await asyncio.sleep(0.005)
    await memory.flush()
    assert memory.health.value == "healthy", (
        f"HLT-004: the first call and retry 1 failed, and with retry_attempts=2 retry 2 was "
        f"left, which succeeded: HEALTHY, not {memory.health.value!r} (precondition)"
    )
    calls = scripted_summarizer.calls
    delivered: list[str] = []
    previous = ""
    for index, call in enumerate(calls):
        failed = index < 2
        sent = users(call["turns"])
        assert call["previous_summary"] == previous, (
            f"call {index} got previous_summary {call['previous_summary']!r}, "
            f"installed was {previous!r}"
        )
        if failed:
            continue
        delivered += sent
        previous = scripted_summarizer.outputs[index]
    assert delivered == [f"u{i}" for i in range(10)], (
        f"successful calls must cover u0..u9 once each, in order; got {delivered}"
    )


@req("WM-004")
async def test_at_most_one_call_in_flight(make_memory):
    active = 0
    peak = 0

    async def summarizer(payload: Any) -> dict[str, str]:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.01)
        active -= 1
        return {"summary": "s"}

    memory = await make_memory(config(full_zone_turns=1), summarizer=summarizer)
    for i in range(10):
        await memory.add_turn(turn(i))
        await asyncio.sleep(0.002)
    await returns_within(
        memory.flush(), what="WM-007: flush() with every summarizer call succeeding"
    )
    assert peak == 1, f"{peak} summarizer calls overlapped"


@req("WM-004")
async def test_at_most_one_call_in_flight_across_a_from_dict(make_memory):
    """``from_dict`` while a call is in flight: from then on, still one call at a time."""
    active = 0
    peak = 0
    gate = asyncio.Event()

    async def summarizer(payload: Any) -> dict[str, str]:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            await gate.wait()
            await asyncio.sleep(0.005)
        finally:
            active -= 1
        return {"summary": ",".join(t["user"] for t in payload["turns"])}

    memory = await make_memory(config(full_zone_turns=1), summarizer=summarizer)
    for i in range(3):
        await memory.add_turn(turn(i))
    await eventually(lambda: active == 1, what="a summarizer call in flight")
    memory.from_dict(json_state(memory))
    for i in range(3, 8):
        await memory.add_turn(turn(i))
        await asyncio.sleep(0.002)
    gate.set()
    await returns_within(
        memory.flush(), what="WM-007: flush() with every summarizer call succeeding"
    )
    assert peak == 1, f"{peak} summarizer calls overlapped after from_dict during a call"


@req("WM-004")
@pytest.mark.stm_capability("serialization")
@pytest.mark.parametrize("mode", ["raise", "not_mapping"])
async def test_a_failed_call_of_the_replaced_state_leaves_the_loaded_state_alone(make_memory, mode):
    """A call in flight when ``from_dict`` replaces the state belongs to the replaced state:
    its failure, like its summary, changes nothing of the loaded one. The loaded state
    stays HEALTHY and its own call for the same turn starts at once, not after a retry
    backoff (30 s here) that the failure would have set."""
    summarizer = ScriptedSummarizer(decide_on_release=True)
    summarizer.hold()
    cfg = config(full_zone_turns=1, retry_backoff_base_s=30.0)
    memory = await make_memory(cfg, summarizer=summarizer)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 evicted: a call for it
    await summarizer.wait_for_calls(1)
    memory.from_dict(json_state(memory))
    summarizer.fail_next(1, mode)
    summarizer.release()  # the replaced state's call fails
    await eventually(lambda: summarizer.ended[0], what="the replaced state's call ends")
    # A turn too, for a backend that summarizes only when a turn comes (HLT-002's fault,
    # checked elsewhere); with no backoff to wait out, it may start the call.
    await memory.add_turn(turn(2))
    await eventually(
        lambda: len(summarizer.calls) >= 2,
        what=(
            f"WM-004: the loaded state's own call for u0, once the replaced state's call failed "
            f"({mode}); health {memory.health.value!r}: that failure must not count"
        ),
    )
    assert memory.health.value == "healthy", (
        f"WM-004: the loaded state is {memory.health.value!r} after a call of the replaced "
        f"state failed ({mode}); that call's outcome must not change it"
    )
    sent = users(summarizer.calls[1]["turns"])
    assert sent[:1] == ["u0"], (
        f"WM-003: the loaded state's call was sent {sent}, not its pending turn u0 first"
    )


@req("WM-007")
@pytest.mark.stm_capability("serialization")
@pytest.mark.parametrize("pending", [1, 2])
async def test_a_flush_waiting_when_from_dict_replaces_the_state_returns(make_memory, pending):
    """``flush()`` waits on a held call; ``from_dict`` replaces the state (with one or two
    turns pending), then the call ends. The flush must return once the loaded state's turns
    are summarized: it cannot wait on the replaced state for good."""
    summarizer = ScriptedSummarizer()
    summarizer.hold()
    memory = await make_memory(config(full_zone_turns=1), summarizer=summarizer)
    for i in range(pending + 1):
        await memory.add_turn(turn(i))
    await summarizer.wait_for_calls(1)
    flushing = asyncio.ensure_future(memory.flush())
    await asyncio.sleep(0.01)
    assert not flushing.done(), "WM-007: flush() returned while its turns' call was held"
    memory.from_dict(json_state(memory))
    summarizer.release()
    await returns_within(
        flushing,
        what="WM-007: a flush() waiting when from_dict replaced the state did not return",
    )


@req("WM-007")
@pytest.mark.stm_capability("serialization")
async def test_a_flush_waits_for_a_loaded_state_already_past_its_turns(make_memory):
    """A waiting ``flush()`` sees ``from_dict`` load a state from further along the same
    conversation: its summary already covers more turns than the flush waited for, and
    one turn of its own is pending. The flush waits for that turn: what it waited for in
    the replaced state is no measure of the loaded one."""
    summarizer = ScriptedSummarizer()
    summarizer.hold()
    memory = await make_memory(config(full_zone_turns=1), summarizer=summarizer)
    for i in range(2):
        await memory.add_turn(turn(i))
    await summarizer.wait_for_calls(1)
    early = json_state(memory)  # u0 pending, nothing summarized
    summarizer.release()
    for i in range(2, 4):
        await memory.add_turn(turn(i))
    await returns_within(memory.flush(), what="WM-007: flush() with no call held")
    summarizer.hold()
    calls = len(summarizer.calls)
    await memory.add_turn(turn(4))
    await summarizer.wait_for_calls(calls + 1)
    later = json_state(memory)  # u0..u2 summarized, u3 pending
    if users((await memory_view(memory)).get("pending_turns")) != ["u3"]:
        raise PreconditionError(f"the later state must hold u3 pending alone: {later}")
    summarizer.release()  # u3's call ends here, not in a later state's way (CON-001)
    await returns_within(memory.flush(), what="WM-007: flush() with no call held")
    summarizer.hold()

    memory.from_dict(early)
    flushing = asyncio.ensure_future(memory.flush())
    await asyncio.sleep(0.01)
    if flushing.done():
        raise PreconditionError("flush() returned while u0's call was held (WM-007)")
    memory.from_dict(later)
    await asyncio.sleep(0.05)
    assert not flushing.done(), (
        "WM-007: a flush() waiting for u0 returned when from_dict loaded a later state of "
        "the conversation (its summary past u0), with that state's turn u3 still pending"
    )
    summarizer.release()
    await returns_within(
        flushing, what="WM-007: a flush() waiting for a loaded state's turn did not return"
    )
    view = await memory_view(memory)
    assert "pending_turns" not in view, (
        f"WM-007: flush() returned with the loaded state's turns still pending: {view}"
    )


#: Turns of the event loop after a turn is evicted at which the next check reloads the
#: state: from before the memory's summarizer call starts to after it reaches the
#: summarizer, for backends that take a few turns (or round trips) to start one.
RELOAD_AFTER_TURNS = 24


@req("WM-004")
@pytest.mark.stm_capability("serialization")
async def test_a_call_begun_before_a_reload_never_reaches_the_summarizer_after_it(make_memory):
    """``from_dict(to_dict())`` right after a turn is evicted, at each of the first turns
    of the event loop: wherever it lands while the memory starts its call, each turn
    reaches exactly one successful call of those made after ``from_dict`` returned. A call
    the replaced state began but that reaches the summarizer only after the reload would
    send the turn a second time, besides the loaded state's own call."""
    for turns_before in range(RELOAD_AFTER_TURNS):
        summarizer = ScriptedSummarizer()
        summarizer.hold()  # no call ends before the reload: u0 is pending in what it loads
        memory = await make_memory(config(full_zone_turns=1), summarizer=summarizer)
        await memory.add_turn(turn(0))
        await _bare_add_turn(memory, turn(1))  # u0 evicted: the memory starts a call for it
        for _ in range(turns_before):
            await asyncio.sleep(0)
        memory.from_dict(json_state(memory))
        reloaded_at = len(summarizer.calls)
        summarizer.release()
        await returns_within(
            memory.flush(), what="WM-007: flush() after a reload, every call succeeding"
        )
        after = [
            users(call["turns"])
            for call, output in zip(
                summarizer.calls[reloaded_at:], summarizer.outputs[reloaded_at:], strict=True
            )
            if output is not None
        ]
        sent = sum(call.count("u0") for call in after)
        assert sent == 1, (
            f"WM-004: reloaded {turns_before} turns of the event loop after u0 was evicted: "
            f"the successful calls made after from_dict returned were {after}, so u0 went to "
            f"{sent} of them, not 1"
            + (
                " (a call the replaced state began reached the summarizer after from_dict "
                "returned, besides the loaded state's own)"
                if sent > 1
                else ""
            )
        )


async def _bare_add_turn(memory: Any, t: Any) -> None:
    """The backend's own ``add_turn``, awaited where the caller is: the checked one runs it
    as a task and looks at the view after it, which lets the loop turn a few times."""
    try:
        async with asyncio.timeout(patient(ADD_TURN_LIMIT_S)):
            await memory._stm_memory.add_turn(t)
    except TimeoutError:
        raise PreconditionError(
            f"WM-001: add_turn did not return within {patient(ADD_TURN_LIMIT_S):g}s while "
            "the summarizer call was held"
        ) from None


@req("WM-006", "WM-004")
@pytest.mark.stm_capability("serialization")
async def test_pending_turns_the_budget_hides_survive_a_round_trip(make_memory):
    """Pending turns hidden by the budget are still pending (WM-006): restored into a
    fresh memory, every one of them still reaches a summarizer call."""
    held = ScriptedSummarizer()
    held.hold()
    cfg = config(full_zone_turns=1, total_max_tokens=90, summary_max_tokens=20)
    key = MemoryKey("t", "u", "hidden-pending")
    memory = await make_memory(cfg, key=key, summarizer=held)
    for i in range(8):
        await memory.add_turn(turn(i, pad=12))
    shown = users((await memory_view(memory)).get("pending_turns"))
    assert len(shown) < 7, f"check setup: the budget hides no pending turn ({shown})"
    state = json_state(memory)
    sent = ScriptedSummarizer()
    clone = await make_memory(cfg, key=key, summarizer=sent)
    clone.from_dict(state)
    await returns_within(clone.flush(), what="WM-007: flush() of the restored memory")
    delivered = [u for call in sent.calls for u in users(call["turns"])]
    missing = [f"u{i}" + "x" * 12 for i in range(7) if f"u{i}" + "x" * 12 not in delivered]
    assert not missing, (
        f"WM-006: pending turns the budget hid were lost in the round trip: {missing} never "
        "reached a summarizer call after from_dict"
    )
    held.release()


@req("WM-005")
async def test_view_orders_pending_before_recent(make_memory, scripted_summarizer):
    memory = await make_memory(config(full_zone_turns=3), summarizer=scripted_summarizer)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await memory.add_turn(turn(2))
    await memory.add_turn(turn(3))
    await memory.flush()
    scripted_summarizer.hold()
    for i in range(4, 8):
        await memory.add_turn(turn(i))
    view = await memory_view(memory)
    order = [int(u[1:]) for u in users(view.get("pending_turns")) + users(view["recent_turns"])]
    assert order == sorted(order) and len(set(order)) == len(order), view
    assert view.get("summary"), "an installed summary must stay in the view"
    scripted_summarizer.release()


@req("WM-005")
@pytest.mark.stm_capability("serialization")
async def test_a_loaded_backlog_outside_degraded_is_shown_in_order(
    make_memory, scripted_summarizer
):
    """A state in the reference format that records a backlog while HEALTHY (a writer
    that kept it after a recovery) holds its oldest turns there: loaded, they are pending
    like the others, and shown in order, oldest first."""
    key = MemoryKey("t", "u", "backlog-outside-degraded")
    cfg = config(full_zone_turns=2)
    memory = await make_memory(cfg, key=key, summarizer=scripted_summarizer)
    scripted_summarizer.hold()  # the evicted turns stay pending
    for i in range(5):
        await memory.add_turn(turn(i))
    await scripted_summarizer.wait_for_calls(1)
    state = json_state(memory)
    if state.get("version") != 2 or state.get("health") != "healthy" or state.get("backlog"):
        pytest.skip("the reference format (version 2) only")
    if len(state["pending"]) < 2:
        raise PreconditionError(f"WM-002: three evicted turns left {state['pending']} pending")
    state["backlog"], state["pending"] = state["pending"][:1], state["pending"][1:]
    quiet = ScriptedSummarizer()
    quiet.hold()  # the loaded turns stay pending while the view is read
    loaded = await make_memory(cfg, key=key, summarizer=quiet)
    try:
        loaded.from_dict(state)
    except ValueError:
        pytest.skip("the backend refuses a backlog outside DEGRADED")
    view = await memory_view(loaded)
    shown = users(view.get("pending_turns")) + users(view.get("recent_turns"))
    assert shown == [f"u{i}" for i in range(5)], (
        f"WM-005: a HEALTHY state with u0 in its backlog and u1, u2 pending shows "
        f"{users(view.get('pending_turns'))} pending, then {users(view.get('recent_turns'))}: "
        f"pending turns are shown oldest first"
    )
    quiet.release()
    scripted_summarizer.release()


@req("WM-006")
@pytest.mark.parametrize("policy", ["truncate_oldest", "truncate_summary"])
async def test_budget_trimming_never_deletes_pending(make_memory, scripted_summarizer, policy):
    cfg = config(
        full_zone_turns=2, total_max_tokens=60, summary_max_tokens=40, overflow_policy=policy
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    for i in range(15):
        await memory.add_turn(turn(i, pad=8))
    scripted_summarizer.release()
    await memory.flush()
    sent = [u for call in scripted_summarizer.calls for u in users(call["turns"])]
    recent = users((await memory_view(memory))["recent_turns"])
    kept = sorted({int(u[1:].rstrip("x")) for u in sent + recent})
    assert kept == list(range(15)), f"turns lost under {policy}: only {kept} survived"


@req("WM-006")
async def test_the_backlog_limit_bounds_nothing_while_healthy(make_memory):
    """``recovery_backlog_limit`` bounds the DEGRADED backlog only: a HEALTHY memory with
    more pending turns than that (a call held) keeps every one until a summary covers it."""

    async def kept(limit: int) -> list[int]:
        summarizer = ScriptedSummarizer()
        cfg = config(full_zone_turns=1, recovery_backlog_limit=limit)
        memory = await make_memory(cfg, summarizer=summarizer)
        summarizer.hold()
        for i in range(10):
            await memory.add_turn(turn(i))
        summarizer.release()
        await memory.flush()
        sent = [u for call in summarizer.calls for u in users(call["turns"])]
        recent = users((await memory_view(memory))["recent_turns"])
        return sorted({int(u[1:]) for u in sent + recent})

    # With a limit above the pending turns first: turns lost there are not the limit's.
    wide = await kept(20)
    assert wide == list(range(10)), (
        f"WM-003: only {wide} of 10 turns reached a summary or stayed recent: turns evicted "
        "while a call was held were lost when its summary was installed"
    )
    narrow = await kept(2)
    assert narrow == list(range(10)), (
        f"WM-006: with recovery_backlog_limit=2 and the memory HEALTHY, only {narrow} of 10 "
        "turns reached a summary or stayed recent: the limit bounds the DEGRADED backlog only"
    )


@req("WM-007")
async def test_flush_waits_for_everything_pending_at_call_time(make_memory, scripted_summarizer):
    memory = await make_memory(config(full_zone_turns=1), summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    for i in range(5):
        await memory.add_turn(turn(i))
    flushing = asyncio.ensure_future(memory.flush())
    await asyncio.sleep(0.02)
    assert not flushing.done(), "flush returned while its turns were still pending"
    scripted_summarizer.release()
    with anyio.fail_after(patient(5)):
        await flushing
    view = await memory_view(memory)
    assert "pending_turns" not in view, f"pending after flush: {view}"
    # The turns evicted while the held call ran must have survived its install (WM-003).
    assert all(f"u{i}" in view["summary"] for i in range(4)), (
        f"WM-003: turns evicted during a call are missing from the summary after flush: {view}"
    )


@scenario("bound:upper")
@req("WM-007")
async def test_flush_does_not_wait_for_turns_evicted_after_it_was_called(
    make_memory, scripted_summarizer
):
    """The other side: what ``flush()`` waits for is what is pending when it is called.
    A turn evicted after the call is pending and summarized in its turn, but a flush
    called before is done once the turns pending at its call are covered."""
    memory = await make_memory(config(full_zone_turns=1), summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 evicted: call 1, held
    await scripted_summarizer.wait_for_calls(1)
    flushing = asyncio.ensure_future(memory.flush())
    await asyncio.sleep(0.02)
    assert not flushing.done(), "WM-007: flush() returned while u0's call was held"
    await memory.add_turn(turn(2))  # u1 evicted after the flush was called
    scripted_summarizer.let_one_through()  # call 1 succeeds: u0 is covered
    try:
        await returns_within(
            flushing,
            timeout=2,
            what="WM-007: a flush() called while u0 alone was pending, once a summary "
            "covered u0 (u1, evicted after the call, is still pending)",
        )
    finally:
        scripted_summarizer.release()


@req("WM-007")
async def test_flush_waits_for_pending_turns_the_budget_hides(make_memory):
    """Pending turns the budget hides from the view are pending all the same (WM-006):
    flush() waits until a summary covers them too."""
    summarizer = ScriptedSummarizer(max_chars=7)  # a summary always within the limits
    memory = await make_memory(config(**HIDING_BUDGET), summarizer=summarizer)
    summarizer.hold()
    await hide_every_pending_turn(memory)
    await eventually(
        lambda: len(summarizer.calls) >= 1,
        what="WM-006: no summarizer call started for u0 and u1, evicted and hidden by the "
        "budget: pending turns are hidden, never deleted",
    )
    view = await memory_view(memory)
    assert not view.get("pending_turns"), f"check setup: a pending turn is visible: {view}"
    flushing = asyncio.ensure_future(memory.flush())
    await asyncio.sleep(0.02)
    returned_early = flushing.done()
    summarizer.release()
    await returns_within(flushing, what="WM-007: flush() once the held calls are released")

    def covered() -> set[str]:
        calls, outputs = summarizer.calls, summarizer.outputs
        return {
            u
            for call, output in zip(calls, outputs, strict=True)
            if output is not None
            for u in users(call["turns"])
        }

    at_return, health = covered(), memory.health.value
    # Turns deleted would explain an early return: nothing was left to wait for.
    await eventually(
        lambda: {"u0", "u1"} <= covered(),
        timeout=1,
        what="WM-006: u0 and u1, pending and hidden by the budget, never reached a summarizer "
        "call that succeeded: pending turns are hidden, never deleted",
    )
    assert not returned_early, (
        "WM-007: flush() returned while a summarizer call for pending turns was held: turns "
        "the budget hides from the view are pending too"
    )
    assert {"u0", "u1"} <= at_return and health == "healthy", (
        f"WM-007: flush() returned before the pending turns u0 and u1 were covered by a "
        f"summary: calls that had succeeded were sent {sorted(at_return)} (health {health!r})"
    )


@req("WM-007")
async def test_flush_returns_when_degraded(make_memory, scripted_summarizer):
    memory = await make_memory(
        config(full_zone_turns=1, retry_attempts=1), summarizer=scripted_summarizer
    )
    scripted_summarizer.fail_always("raise")
    for i in range(3):
        await memory.add_turn(turn(i))
    with anyio.fail_after(patient(5)):
        await memory.flush()
    assert memory.health.value == "degraded"


@req("WM-007")
@pytest.mark.stm_capability("truncation")
async def test_flush_returns_at_once_for_other_strategies(make_memory):
    memory = await make_memory(config("truncation", full_zone_turns=1))
    await memory.add_turn(turn(1))
    await returns_within(memory.flush(), timeout=1, what="WM-007: flush() with no summarizer")


@req("WM-008")
async def test_flush_does_not_hang_on_a_summarizer_that_ignores_cancellation(make_memory):
    """A client that swallows ``CancelledError`` (a retry loop inside it, a shielded
    request): its call must still be given up at ``summarizer_timeout_s``, not waited for
    until it ends, so ``flush()`` returns, and the timeout counts as a failure."""
    end = asyncio.Event()
    calls = 0

    async def stubborn(payload: Any) -> dict[str, str]:
        nonlocal calls
        calls += 1
        while not end.is_set():
            try:
                await end.wait()
            except asyncio.CancelledError:
                continue  # ignores its cancellation
        return {"summary": "late"}

    cfg = config(full_zone_turns=1, retry_attempts=0, summarizer_timeout_s=0.05)
    memory = await make_memory(cfg, summarizer=stubborn)
    try:
        await memory.add_turn(turn(0))
        await memory.add_turn(turn(1))
        flushing = asyncio.ensure_future(memory.flush())
        done, _ = await asyncio.wait({flushing}, timeout=patient(4))
        if not done:
            flushing.cancel()
            if memory.health.value == "retry" and calls > 1:
                raise AssertionError(
                    f"HLT-004: {calls} calls timed out and the memory still retries, with "
                    "retry_attempts=0: it never degrades, so flush() never returns"
                )
            raise AssertionError(
                "WM-008: flush() waited on a summarizer call that ignores its cancellation: "
                "at summarizer_timeout_s the call must be given up, not awaited"
            )
        flushing.result()
        assert memory.health.value == "degraded", (
            f"HLT-007: a call that timed out is a failure (health {memory.health.value!r})"
        )
    finally:
        end.set()


@scenario("bound:upper")
@req("WM-008", "HLT-007")
async def test_flush_does_not_hang_on_a_hung_summarizer(make_memory, scripted_summarizer):
    cfg = config(full_zone_turns=1, retry_attempts=1, summarizer_timeout_s=0.05)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_always("hang")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    with anyio.fail_after(patient(5)):
        await memory.flush()
    assert memory.health.value == "degraded", "a hung call must count as a failure"


@scenario("bound:upper")
@req("WM-008")
async def test_a_hung_call_of_many_turns_times_out_like_one_of_one(
    make_memory, scripted_summarizer
):
    """The timeout is the call's, whatever it was sent: a hung call of twenty turns is
    abandoned after ``summarizer_timeout_s`` as one of one turn is. The twenty are evicted
    while a first call is held; that call succeeds, and the next one, sent what is pending
    then, hangs. (How pending turns are split into calls is the backend's choice: one that
    sends them one at a time makes no call of many turns, and this check does not apply.)"""
    timeout = 0.2
    cfg = config(
        full_zone_turns=1,
        retry_attempts=1,
        retry_backoff_base_s=0.001,
        summarizer_timeout_s=timeout,
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.hold()
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 evicted: the first call, held
    await scripted_summarizer.wait_for_calls(1)
    for i in range(2, 22):
        await memory.add_turn(turn(i))  # u1..u20 evicted while it is held
    scripted_summarizer.fail_always("hang")  # calls from now on; the held one succeeds
    scripted_summarizer.release()
    try:
        await scripted_summarizer.wait_for_calls(2)
    except TimeoutError:
        raise PreconditionError(
            "WM-003: u1..u20, evicted while the first call was held, got no call once it "
            f"succeeded (view: {await memory_view(memory)})"
        ) from None
    sent = len(scripted_summarizer.calls[1]["turns"])
    if sent <= 1:
        pytest.skip(
            "the backend sent the turns pending after a call one at a time: it makes no "
            "call of many turns to time"
        )
    started = scripted_summarizer.call_times[1]

    def failed() -> bool:  # counted as a failure: the health left HEALTHY, or a next call
        return memory.health.value != "healthy" or len(scripted_summarizer.calls) > 2

    limit = timeout + patient(1.0)
    with anyio.move_on_after(max(0.0, started + limit - time.monotonic())):
        while not failed():  # noqa: ASYNC110 - polling the memory's health
            await anyio.sleep(0.005)
    took = time.monotonic() - started
    assert failed(), (
        f"WM-008: a hung call sent {sent} turns had not failed {took:.2f}s after it started; "
        f"summarizer_timeout_s={timeout} bounds every call"
    )


@req("WM-008")
async def test_a_hung_recovery_attempt_times_out(make_memory, scripted_summarizer):
    """Recovery attempts are summarizer calls like any other: one that hangs fails after
    ``summarizer_timeout_s``, and the next attempt follows."""
    timeout = 0.05
    cfg = config(
        full_zone_turns=1,
        retry_attempts=0,
        degraded_retry_interval_s=0.01,
        summarizer_timeout_s=timeout,
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_next(1, mode="raise")  # the first attempt: DEGRADED
    scripted_summarizer.fail_always("hang")  # every recovery attempt hangs
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await eventually(
        lambda: len(scripted_summarizer.calls) >= 2,
        what="HLT-006: a recovery attempt the memory makes by itself (precondition)",
    )
    await eventually(
        lambda: len(scripted_summarizer.calls) >= 3,
        timeout=2,
        what=f"WM-008: a recovery attempt that hangs did not fail after summarizer_timeout_s="
        f"{timeout}s: no further attempt came",
    )


@scenario("bound:upper")
@req("WM-008")
async def test_an_answer_after_the_timeout_is_not_installed(make_memory):
    """A call that answers after ``summarizer_timeout_s`` has failed, though it answers
    in the end: its late summary is not installed (a grace past the timeout, a deadline
    checked only once the answer is in, would install it). The answer comes at 1.5 times
    the timeout, 0.1 s after it."""
    timeout = 0.2
    starts: list[float] = []

    async def summarizer(payload: Any) -> dict[str, str]:
        starts.append(time.monotonic())
        await asyncio.sleep(timeout * 1.5)
        return {"summary": "late: " + ",".join(t["user"] for t in payload["turns"])}

    cfg = config(full_zone_turns=1, summarizer_timeout_s=timeout, retry_backoff_base_s=30.0)
    memory = await make_memory(cfg, summarizer=summarizer)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 evicted: the call, answering late
    await eventually(lambda: bool(starts), what="WM-001: the summarizer was called (precondition)")
    # Past the answer (and the timeout's slack): what the memory made of the call is settled.
    await anyio.sleep(max(0.0, starts[0] + timeout * 3 - time.monotonic()))
    view = await memory_view(memory)
    assert not view.get("summary") and memory.health.value != "healthy", (
        f"WM-008: a call that answered {timeout * 1.5:.1f}s after it started, past "
        f"summarizer_timeout_s={timeout}, was installed or not failed: health "
        f"{memory.health.value!r}, summary {view.get('summary')!r}"
    )


@scenario("bound:lower")
@req("WM-008")
async def test_a_slow_call_within_the_timeout_is_not_abandoned(make_memory):
    """The other side of WM-008: only a call running *longer* than
    ``summarizer_timeout_s`` fails; a slow but valid answer within it is installed."""
    slow_s = 0.3

    async def summarizer(payload: Any) -> dict[str, str]:
        await asyncio.sleep(slow_s)
        return {"summary": ",".join(t["user"] for t in payload["turns"])}

    cfg = config(full_zone_turns=1, summarizer_timeout_s=slow_s * 6, retry_backoff_base_s=30.0)
    memory = await make_memory(cfg, summarizer=summarizer)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    view = await summary_or_failure(memory)
    assert memory.health.value == "healthy" and view.get("summary") == "u0", (
        f"WM-008: a call answering in {slow_s}s, within summarizer_timeout_s="
        f"{cfg.summarizer_timeout_s}, was not installed (health {memory.health.value!r}, "
        f"view {view})"
    )
