"""HLT — the summarizer health state machine."""

from __future__ import annotations

import asyncio
import bisect
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from stm_conformance import ScriptedSummarizer
from stm_conformance.checks import (
    HIDING_BUDGET,
    assert_not_late,
    config,
    dropped_while_not_degraded,
    eventually,
    hide_every_pending_turn,
    json_state,
    memory_view,
    not_concluded,
    patient,
    returns_within,
    turn,
    users,
)
from stm_conformance.contract import MemoryKey
from stm_conformance.fixtures import PreconditionError

pytestmark = [pytest.mark.stm_capability("rolling_summary")]
req = pytest.mark.stm_requirement
scenario = pytest.mark.stm_scenario

INVALID_MODES = [
    "raise", "string", "not_mapping", "no_summary", "non_string", "bytes", "oversize",
    "attribute", "base_exception", "hang",
]  # fmt: skip


async def _degrade(memory: Any, summarizer: ScriptedSummarizer) -> None:
    """Every call fails; u0 is evicted (a window of 1) and sent: with ``retry_attempts=0``
    the memory degrades after that one call."""
    summarizer.fail_always("raise")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await eventually(
        lambda: memory.health.value == "degraded", what="HLT-004: DEGRADED (precondition)"
    )
    # Any call within one recovery interval of the first is a retry: no recovery attempt
    # comes sooner (HLT-006), so the count holds however late this is checked.
    interval = memory._stm_config.degraded_retry_interval_s
    first = summarizer.call_times[0]
    calls = sum(1 for t in summarizer.call_times if t - first < interval)
    assert calls == 1, (
        f"HLT-004: with retry_attempts=0 the memory degrades after its first failed call; "
        f"{calls} calls came within {interval}s of it (precondition)"
    )


#: How the reload checks load a state again: in place, or through the provider's store.
RELOADS = [
    pytest.param("from_dict", marks=pytest.mark.stm_capability("serialization")),
    pytest.param("hydrate", marks=pytest.mark.stm_capability("persistence")),
]


def _reloader(memory: Any, via: str, store: Any, storage_key: str) -> Any:
    """An async function that loads ``memory``'s own state into it again, ``via``
    ``from_dict(to_dict())`` or ``persist`` then ``hydrate``."""

    async def reload() -> None:
        if via == "from_dict":
            memory.from_dict(json_state(memory))
        else:
            await memory.persist(store, storage_key)
            await memory.hydrate(store, storage_key)

    return reload


@dataclass(frozen=True)
class _Reloads:
    """Summarizer calls around ten loads of a memory's own state."""

    #: When the last call before the first load started (its outcome started the timer).
    before: float
    #: When each load began.
    loads: list[float]
    #: When each call since the first load started.
    calls: list[float]
    #: Seconds from the first load to the end of the quiet spell after the last.
    elapsed: float


async def _calls_while_reloading(
    reload: Callable[[], Awaitable[None]],
    summarizer: ScriptedSummarizer,
    loaded: Callable[[], None],
    wait: float,
) -> _Reloads:
    """Load ten times, 10 ms apart, ``loaded()`` checking each load, then let the last
    load's state be for ``0.8 * wait``, short of the ``wait`` its next call is due after
    (and past the time the first load's would have been due): the calls that started
    meanwhile."""
    before = max(summarizer.call_times, default=0.0)
    loads = []
    for _ in range(10):
        loads.append(time.monotonic())
        await reload()
        loaded()
        await anyio.sleep(0.01)
    await anyio.sleep(0.8 * wait)
    calls = [t for t in summarizer.call_times if t >= loads[0]]
    return _Reloads(before, loads, calls, time.monotonic() - loads[0])


def _made_due_by_a_load(reloads: _Reloads, wait: float) -> list[float]:
    """The calls that came sooner than ``wait`` after the load before them while no time
    between loads (or before the first) was long enough for one to fall due: the load made
    them due. Each as seconds after that load.

    A call may come soon after a load when it was due, and begun, before it (it belongs to
    the replaced state): only on a machine too busy to load every 10 ms, and then no call
    is judged. Margins of a tenth of ``wait`` for the timers' slack."""
    starts = [reloads.before, *reloads.loads]
    soon = []
    for t in reloads.calls:
        k = bisect.bisect_right(reloads.loads, t) - 1  # the last load before the call
        since = t - reloads.loads[k]
        if since >= 0.9 * wait:
            continue
        if any(starts[j + 1] - starts[j] >= 0.9 * wait for j in range(k + 1)):
            continue
        soon.append(round(since, 3))
    return soon


@req("HLT-001")
async def test_new_memory_is_healthy(make_memory):
    memory = await make_memory(config())
    assert memory.health.value == "healthy"
    assert isinstance(memory.health, str), "health must be a str enum"


@scenario("bound:lower", "bound:upper")
@req("HLT-002", "HLT-004")
async def test_failure_retries_by_itself_then_recovers(make_memory, scripted_summarizer):
    base = 0.15
    # Three failed calls, and a retry to spare: a memory that degrades a retry early is
    # HLT-004's to judge, elsewhere, not this check's.
    cfg = config(full_zone_turns=1, retry_attempts=4, retry_backoff_base_s=base)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_next(3, mode="raise")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await eventually(lambda: memory.health.value == "retry", what="RETRY after a failure")
    # No further add_turn: the memory must retry on its own.
    await scripted_summarizer.wait_for_calls(4)
    await eventually(lambda: memory.health.value == "healthy", what="HEALTHY after a success")
    starts = scripted_summarizer.call_times
    # Retry n waits base * 2**(n-1): not less, and not much more. Three retries: the third
    # (4 * base) is the first a backoff of base * n (3 * base) falls short of.
    for n in (1, 2, 3):
        gap, backoff = starts[n] - starts[n - 1], base * 2 ** (n - 1)
        assert gap >= backoff * 0.9, f"retry {n} came {gap:.3f}s after, before its {backoff}s"
        assert_not_late(
            gap - (backoff * 1.5 + patient(0.2)),
            starts[n - 1],
            starts[n],
            f"retry {n} came {gap:.3f}s after the call before it; its backoff is {backoff}s",
        )
    # The backoff doubles: retry 2 waits twice what retry 1 waited. Measured against the
    # first gap, so a machine's timer lag cancels out (three times would be 0.15 s more).
    first, second = starts[1] - starts[0], starts[2] - starts[1]
    assert_not_late(
        second - (2 * first + patient(0.06)),
        starts[1],
        starts[2],
        f"HLT-002: retry 2 came {second:.3f}s after retry 1, which came {first:.3f}s after the "
        f"first call: the backoff base * 2**(n-1) doubles, it does not grow faster",
    )
    assert (await memory_view(memory)).get("summary"), "the recovered summary is installed"
    # A new failure after the success starts again from retry 1's backoff, and turns added
    # while it waits bring no retry sooner.
    scripted_summarizer.fail_next(1, mode="raise")
    await memory.add_turn(turn(2))  # u1 evicted: a call for it, which fails
    await scripted_summarizer.wait_for_calls(5)
    await eventually(lambda: memory.health.value == "retry", what="RETRY after a new failure")
    for i in range(3, 8):
        await memory.add_turn(turn(i))
        await anyio.sleep(0.01)
    await scripted_summarizer.wait_for_calls(6)
    gap = starts[5] - starts[4]
    assert gap >= base * 0.9, (
        f"HLT-002: retry 1 came {gap:.3f}s after the failed call, before its {base}s backoff: "
        "turns added in RETRY must not bring a retry sooner"
    )
    assert_not_late(
        gap - (base * 1.5 + patient(0.2)),
        starts[4],
        starts[5],
        f"HLT-002: retry 1 of a new failure came {gap:.3f}s after it, not about {base}s: after "
        "a success the backoff starts again from retry 1's",
    )


@req("HLT-003")
@pytest.mark.parametrize("mode", ["raise", "oversize", "not_mapping"])
async def test_retry_keeps_summary_and_pending(make_memory, scripted_summarizer, mode):
    """Whatever the failure (an exception, a summary over its limit, output that is no
    mapping), RETRY keeps the last good summary and every pending turn."""
    cfg = config(full_zone_turns=1, retry_backoff_base_s=30.0)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await memory.flush()
    summary = (await memory_view(memory))["summary"]
    scripted_summarizer.fail_next(1, mode=mode)
    await memory.add_turn(turn(2))
    # Not taken as a failure at all is BUD-007's (a summary over its limit) or HLT-007's.
    rule = {"raise": "HLT-002", "oversize": "BUD-007"}.get(mode, "HLT-007")
    await eventually(
        lambda: memory.health.value == "retry",
        what=f"{rule}: RETRY after a failed call ({mode}) (precondition)",
    )
    await memory.add_turn(turn(3))
    view = await memory_view(memory)
    assert view.get("summary") == summary, (
        f"HLT-003: RETRY after a failed call ({mode}) must keep the last good summary "
        f"{summary!r}, not {view.get('summary')!r}"
    )
    pending = users(view.get("pending_turns"))
    assert pending[:1] == ["u1"], (
        f"HLT-003: RETRY after a failed call ({mode}) must keep pending u1, the turn the "
        f"call failed on: pending {pending}"
    )
    assert pending == ["u1", "u2"], (
        f"WM-002: u2, evicted in RETRY, must be pending after u1: pending {pending}"
    )


@scenario("bound:lower", "bound:upper")
@req("HLT-004")
@pytest.mark.parametrize("attempts", [0, 2])
async def test_degrades_after_retries_are_exhausted(make_memory, scripted_summarizer, attempts):
    cfg = config(full_zone_turns=1, retry_attempts=attempts)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_always("raise")
    for i in range(3):
        await memory.add_turn(turn(i))
    await eventually(lambda: memory.health.value == "degraded", what="DEGRADED")
    assert len(scripted_summarizer.calls) == attempts + 1, (
        f"expected the first attempt and {attempts} retries before DEGRADED, "
        f"got {len(scripted_summarizer.calls)} calls"
    )
    view = await memory_view(memory)
    assert set(view) == {"recent_turns"}, f"DEGRADED shows recent turns only: {view}"


@req("HLT-004")
async def test_failures_are_counted_afresh_after_a_success(make_memory, scripted_summarizer):
    """A success ends a failure episode, a recovery's too: the next episode again gets the
    first attempt and ``retry_attempts`` retries before DEGRADED."""
    cfg = config(
        full_zone_turns=1,
        retry_attempts=1,
        retry_backoff_base_s=0.01,
        degraded_retry_interval_s=0.05,
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_next(1, mode="raise")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await eventually(
        lambda: len(scripted_summarizer.calls) >= 2,
        what="HLT-002: a retry the memory schedules itself (precondition)",
    )
    await eventually(lambda: memory.health.value == "healthy", what="HEALTHY after the retry")

    async def failing_episode(after: str, i: int) -> None:
        """Every call fails from turn ``i`` on: the first attempt and every retry, then
        DEGRADED, no sooner and no later."""
        before = len(scripted_summarizer.calls)
        scripted_summarizer.fail_always("raise")
        await memory.add_turn(turn(i))
        await eventually(lambda: memory.health.value == "degraded", what=f"DEGRADED after {after}")
        calls = len(scripted_summarizer.calls) - before
        assert calls == cfg.retry_attempts + 1, (
            f"HLT-004: after {after}, {calls} failed call(s) led to DEGRADED; the new episode "
            f"gets the first attempt and {cfg.retry_attempts} retry"
        )

    await failing_episode("a success", 2)
    scripted_summarizer.succeed()
    await eventually(
        lambda: memory.health.value == "healthy", what="HLT-006: recovery (precondition)"
    )
    await failing_episode("a recovery", 3)


@req("HLT-004")
async def test_a_success_in_retry_is_healthy_with_turns_still_pending(
    make_memory, scripted_summarizer
):
    """A retry that succeeds while turns evicted during it are still pending returns to
    HEALTHY then: the memory is not in RETRY until it has caught up."""
    cfg = config(full_zone_turns=1, retry_attempts=5, retry_backoff_base_s=0.05)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_next(1, mode="raise")
    scripted_summarizer.hold()
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 evicted: the first call, held, then fails
    await scripted_summarizer.wait_for_calls(1)
    scripted_summarizer.let_one_through()
    try:
        await scripted_summarizer.wait_for_calls(2)  # retry 1, held
    except TimeoutError as exc:
        raise PreconditionError(f"HLT-002: no retry came by itself: {exc}") from None
    if memory.health.value != "retry":
        raise PreconditionError(f"HLT-002: {memory.health.value!r} during retry 1, not RETRY")
    pending = users((await memory_view(memory)).get("pending_turns"))
    if pending != ["u0"]:
        raise PreconditionError(f"HLT-003: in RETRY the view shows pending turns {pending}")
    await memory.add_turn(turn(2))
    await memory.add_turn(turn(3))  # u1 and u2 evicted while retry 1 runs
    pending = users((await memory_view(memory)).get("pending_turns"))
    if pending != ["u0", "u1", "u2"]:
        raise PreconditionError(f"WM-002: pending while retry 1 runs: {pending}")
    scripted_summarizer.let_one_through()  # retry 1 succeeds; the next call stays held

    async def installed() -> bool:
        return "summary" in await memory_view(memory)

    await eventually(installed, what="HLT-004: retry 1's summary installed")
    view = await memory_view(memory)
    if users(view.get("pending_turns")) != ["u1", "u2"]:
        raise PreconditionError(f"WM-003: u1 and u2 pending after retry 1's install: {view}")
    assert memory.health.value == "healthy", (
        f"HLT-004: a retry succeeded, its summary installed, with u1 and u2 still pending, "
        f"and the memory is {memory.health.value!r}: a success in RETRY returns to HEALTHY"
    )
    scripted_summarizer.release()


@req("HLT-004")
@pytest.mark.stm_capability("serialization")
async def test_failures_before_a_restore_still_count_after_it(make_memory, scripted_summarizer):
    """A state saved in RETRY after the first attempt and one retry failed, restored into a
    fresh memory: with ``retry_attempts=2`` one retry is left, so the next failure degrades.
    A state that forgets how many calls failed grants the retries again."""
    cfg = config(full_zone_turns=1, retry_attempts=2, retry_backoff_base_s=0.01)
    key = MemoryKey("t", "u", f"restored-in-retry-{uuid.uuid4().hex}")
    memory = await make_memory(cfg, key=key, summarizer=scripted_summarizer)
    scripted_summarizer.fail_always("raise")
    scripted_summarizer.hold()
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await scripted_summarizer.wait_for_calls(1)
    scripted_summarizer.let_one_through()  # the first attempt fails
    await eventually(
        lambda: len(scripted_summarizer.calls) >= 2,
        what="HLT-002: retry 1, scheduled by the memory itself (precondition)",
    )
    scripted_summarizer.let_one_through()  # retry 1 fails
    # Retry 2 started (held): both failures are in the state saved now.
    await eventually(
        lambda: len(scripted_summarizer.calls) >= 3 or memory.health.value == "degraded",
        what="HLT-002: retry 2, scheduled by the memory itself (precondition)",
    )
    assert memory.health.value != "degraded", (
        "HLT-004: DEGRADED after the first attempt and retry 1 failed; with retry_attempts=2 "
        "retry 2 is left"
    )
    assert memory.health.value == "retry", (
        f"HLT-002: RETRY while retry 2 of 2 runs, not {memory.health.value!r}"
    )
    state = json_state(memory)
    restored_summarizer = ScriptedSummarizer()
    restored_summarizer.fail_always("raise")
    restored = await make_memory(cfg, key=key, summarizer=restored_summarizer)
    restored.from_dict(state)
    assert restored.health.value == "retry", (
        f"SER-002: a state saved in RETRY was restored as {restored.health.value!r}"
    )
    await eventually(
        lambda: restored.health.value == "degraded",
        what="HLT-004: DEGRADED once the one retry left after the restore failed",
    )
    calls = len(restored_summarizer.calls)
    assert calls == 1, (
        f"HLT-004: restored after 2 of the {cfg.retry_attempts + 1} attempts failed, the "
        f"memory made {calls} failing calls before DEGRADED; 1 was left (the failures before "
        "the restore still count)"
    )


@scenario("bound:lower", "bound:upper")
@req("HLT-005")
async def test_degraded_backlog_is_bounded_and_counted(
    make_memory, scripted_summarizer, stm_capabilities
):
    """Every summarizer call fails until the 8 turns after degrading are in: a backend
    slow enough to add them over more than ``degraded_retry_interval_s`` may make recovery
    attempts meanwhile, and those fail, so the backlog the final recovery sends is the same
    for a fast backend and a slow one."""
    cfg = config(
        full_zone_turns=1, retry_attempts=0, recovery_backlog_limit=3, degraded_retry_interval_s=0.2
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_always("raise")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await eventually(
        lambda: memory.health.value == "degraded", what="HLT-004: DEGRADED (precondition)"
    )
    degraded_at, before = time.monotonic(), len(scripted_summarizer.calls)
    for i in range(2, 10):
        await memory.add_turn(turn(i))
    calls = len(scripted_summarizer.calls) - before
    quick = time.monotonic() - degraded_at < 0.15  # within the interval: no attempt is due
    assert not quick or (memory.health.value == "degraded" and calls == 0), (
        f"HLT-006: 8 turns added within degraded_retry_interval_s of degrading, and the memory "
        f"is {memory.health.value!r} after {calls} more calls: a turn must not bring a "
        "recovery attempt sooner (precondition)"
    )
    if "serialization" in stm_capabilities:
        dropped = memory.to_dict().get("dropped_turns")
        assert dropped == 6, f"9 evicted turns, backlog of 3: dropped_turns={dropped}, want 6"
    scripted_summarizer.succeed()
    await eventually(
        lambda: memory.health.value == "healthy",
        timeout=5,
        what="HLT-006: recovery to HEALTHY (precondition)",
    )
    recovery = users(scripted_summarizer.calls[-1]["turns"])
    assert sorted(recovery) == ["u6", "u7", "u8"], (
        f"the backlog keeps the newest {cfg.recovery_backlog_limit} turns: {recovery}"
    )
    assert recovery == ["u6", "u7", "u8"], (
        f"WM-004: the recovery sent the backlog out of the order the turns were added: {recovery}"
    )
    if "serialization" in stm_capabilities:
        dropped = memory.to_dict().get("dropped_turns")
        assert dropped == 6, (
            f"the 6 turns dropped stay counted after the recovery covered the backlog: "
            f"dropped_turns={dropped}"
        )


@scenario("bound:upper")
@req("HLT-005")
@pytest.mark.stm_capability("serialization")
async def test_a_backlog_limit_of_zero_keeps_no_turn_and_counts_each(
    make_memory, scripted_summarizer
):
    """``recovery_backlog_limit=0`` is a limit like any other, not "unlimited": in DEGRADED
    every evicted turn is dropped at once, and counted."""
    cfg = config(full_zone_turns=1, retry_attempts=0, recovery_backlog_limit=0)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_always("raise")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await eventually(
        lambda: memory.health.value == "degraded" or bool(dropped_while_not_degraded(memory)),
        what="HLT-004: DEGRADED (precondition)",
    )
    wm006 = dropped_while_not_degraded(memory)
    assert wm006 is None, wm006
    for i in range(2, 8):
        await memory.add_turn(turn(i))
    state = memory.to_dict()
    dropped, backlog = state.get("dropped_turns"), state.get("backlog")
    assert dropped == 7 and not backlog, (
        f"HLT-005: with recovery_backlog_limit=0, 7 turns evicted (u0..u6) must all be "
        f"dropped and counted: dropped_turns={dropped}, backlog of {len(backlog or [])}"
    )


@req("HLT-005")
@pytest.mark.stm_capability("serialization")
async def test_pending_turns_cut_when_degrading_are_counted(make_memory, scripted_summarizer):
    """Five turns pending when the last attempt fails move to a backlog of 2: the three
    oldest are dropped on the way in, and counted like any other drop; the two newest
    are kept."""
    cfg = config(full_zone_turns=1, retry_attempts=0, recovery_backlog_limit=2)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_next(1, mode="raise")
    scripted_summarizer.hold()
    for i in range(6):
        await memory.add_turn(turn(i))
    pending = users((await memory_view(memory)).get("pending_turns"))
    wm006 = dropped_while_not_degraded(memory)
    assert wm006 is None, f"{wm006}: pending {pending}"
    assert pending == ["u0", "u1", "u2", "u3", "u4"], f"WM-002: pending {pending}"
    await scripted_summarizer.wait_for_calls(1)
    scripted_summarizer.release()  # the one attempt fails: DEGRADED
    await eventually(
        lambda: memory.health.value in ("degraded", "recovering"),
        what="HLT-004: DEGRADED (precondition)",
    )
    state = memory.to_dict()
    dropped = state.get("dropped_turns")
    assert dropped == 3, (
        f"HLT-005: 5 pending turns moved to a backlog of {cfg.recovery_backlog_limit} when "
        f"the memory degraded: dropped_turns={dropped}, want 3"
    )
    if state.get("version") == 2:  # the reference format names the turns it keeps
        kept = [record.get("user_message") for record in state.get("backlog") or []]
        assert kept == ["u3", "u4"], (
            f"HLT-005: the backlog of {cfg.recovery_backlog_limit} kept {kept}; the oldest "
            "are dropped first, so it keeps the newest, ['u3', 'u4']"
        )


@req("HLT-005")
@pytest.mark.stm_capability("serialization")
async def test_a_backlog_loaded_under_a_smaller_limit_counts_what_it_drops(make_memory):
    """A DEGRADED state with a backlog of 5, loaded into a memory whose
    ``recovery_backlog_limit`` is 2 (configured lower since it was saved): the backlog
    keeps the two newest turns, which the recovery is sent, and the three it drops are
    counted like any other drop (``dropped_turns``, in the reference format)."""
    failing = ScriptedSummarizer()
    failing.fail_always("raise")
    cfg = config(full_zone_turns=1, retry_attempts=0, recovery_backlog_limit=5)
    key = MemoryKey("t", "u", f"backlog-{uuid.uuid4().hex}")
    source = await make_memory(cfg, key=key, summarizer=failing)
    for i in range(6):  # u0's call fails: DEGRADED; u1..u4 join u0 in the backlog
        await source.add_turn(turn(i))
    await eventually(
        lambda: source.health.value == "degraded", what="HLT-004: DEGRADED (precondition)"
    )
    state = json_state(source)
    v2 = state.get("version") == 2  # the reference format names its backlog and drops
    backlog = [record.get("user_message") for record in state.get("backlog") or []]
    if v2 and (backlog != ["u0", "u1", "u2", "u3", "u4"] or state.get("dropped_turns", 0)):
        raise PreconditionError(
            f"HLT-005: a backlog of 5 holds {backlog}, dropped_turns="
            f"{state.get('dropped_turns', 0)}"
        )
    recovering = ScriptedSummarizer()
    smaller = config(
        full_zone_turns=1,
        retry_attempts=0,
        recovery_backlog_limit=2,
        degraded_retry_interval_s=0.05,
    )
    memory = await make_memory(smaller, key=key, summarizer=recovering)
    memory.from_dict(state)
    if v2:
        loaded = memory.to_dict()
        kept = [record.get("user_message") for record in loaded.get("backlog") or []]
        dropped = loaded.get("dropped_turns", 0)
        assert kept == ["u3", "u4"] and dropped == 3, (
            f"HLT-005: loaded under recovery_backlog_limit=2, the backlog of 5 keeps {kept} "
            f"with dropped_turns={dropped}; the newest two are kept and the three dropped "
            "are counted (3)"
        )
    try:
        await recovering.wait_for_calls(1)
    except TimeoutError:
        raise PreconditionError(
            "HLT-006: the loaded DEGRADED memory made no recovery attempt"
        ) from None
    sent = users(recovering.calls[0].get("turns"))
    if sorted(sent) == ["u3", "u4"] and sent != ["u3", "u4"]:
        raise PreconditionError(f"WM-004: the backlog was sent out of order: {sent}")
    assert sent == ["u3", "u4"], (
        f"HLT-005: loaded under recovery_backlog_limit=2, the backlog of 5 sent its recovery "
        f"{sent}, not the newest two, ['u3', 'u4']"
    )


@req("HLT-005")
async def test_turns_dropped_while_a_recovery_attempt_holds_them_are_not_lost(
    make_memory, scripted_summarizer, stm_capabilities
):
    """A recovery attempt is sent the backlog [u0]; while it runs, two evictions overflow a
    backlog of 2 and drop u0 and u1. The attempt succeeds: u0 is covered by its summary, so
    only u1 stays dropped, and the turns evicted meanwhile (u2, u3) become pending."""
    cfg = config(
        full_zone_turns=1,
        retry_attempts=0,
        recovery_backlog_limit=2,
        degraded_retry_interval_s=0.01,
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_next(1, mode="raise")
    # Held from the start: DEGRADED lasts 10 ms before the recovery attempt, which a poll
    # of a loaded process can miss; held, the attempt keeps the memory RECOVERING, which
    # only DEGRADED leads to.
    scripted_summarizer.hold()
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # u0 pending: the first call fails, DEGRADED
    await scripted_summarizer.wait_for_calls(1)
    scripted_summarizer.let_one_through()
    await eventually(
        lambda: (
            memory.health.value in ("degraded", "recovering") or len(scripted_summarizer.calls) >= 2
        ),
        what="HLT-004: DEGRADED (precondition)",
    )
    assert memory.health.value in ("degraded", "recovering"), (
        f"HLT-004: with retry_attempts=0 the first failed call degrades; the memory is "
        f"{memory.health.value!r} as its second call starts"
    )
    await eventually(  # the recovery attempt, sent [u0], held
        lambda: len(scripted_summarizer.calls) >= 2,
        what="HLT-006: a recovery attempt the memory makes by itself (precondition)",
    )
    sent = users(scripted_summarizer.calls[1]["turns"])
    assert sent == ["u0"], f"HLT-006: the recovery attempt was sent {sent}, want the backlog ['u0']"
    for i in (2, 3, 4):  # evicts u1, u2, u3: the backlog [u0, u1, u2, u3] keeps its newest 2
        await memory.add_turn(turn(i))
    if "serialization" in stm_capabilities:
        dropped = memory.to_dict().get("dropped_turns")
        assert dropped == 2, f"HLT-005: u0 and u1 dropped from a backlog of 2: {dropped}, want 2"
    scripted_summarizer.release()
    await eventually(lambda: memory.health.value == "healthy", what="HLT-006: recovery to HEALTHY")
    await memory.flush()
    later = [u for call in scripted_summarizer.calls[2:] for u in users(call["turns"])]
    # Other turns than u2 and u3 left: the backlog dropped the wrong ones (HLT-005); fewer:
    # the turns evicted during the attempt did not become pending (HLT-006); one sent twice
    # by calls that all succeed: an install kept a turn its call was sent (WM-003).
    rule = "HLT-005" if set(later) - {"u2", "u3"} else "HLT-006"
    if len(set(later)) < len(later):
        rule = "WM-003"
    assert later == ["u2", "u3"], (
        f"{rule}: the backlog keeps its newest turns, and those evicted during the recovery "
        f"become pending after it and are summarized next: later calls were sent {later}, "
        "want ['u2', 'u3']"
    )
    if "serialization" in stm_capabilities:
        dropped = memory.to_dict().get("dropped_turns")
        assert dropped == 1, (
            f"HLT-005: u0, dropped while the successful recovery attempt held it, is covered by "
            f"its summary; only u1 is lost: dropped_turns={dropped}, want 1"
        )


@scenario("bound:lower", "bound:upper")
@req("HLT-006")
async def test_recovery_is_rate_limited_and_returns_to_healthy(
    make_memory, scripted_summarizer, recording_callbacks, stm_capabilities
):
    interval = 0.05
    callbacks = "callbacks" in stm_capabilities
    cfg = config(
        full_zone_turns=1,
        retry_attempts=0,
        degraded_retry_interval_s=interval,
        **(recording_callbacks.config_kwargs() if callbacks else {}),
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    await _degrade(memory, scripted_summarizer)
    started = time.monotonic()
    await anyio.sleep(interval * 6)
    attempts = len(scripted_summarizer.calls) - 1
    elapsed = time.monotonic() - started
    assert 1 <= attempts <= elapsed / interval + 1, (
        f"{attempts} recovery attempts in {elapsed:.2f}s with interval {interval}s"
    )
    scripted_summarizer.succeed()
    await memory.add_turn(turn(2))
    await eventually(lambda: memory.health.value == "healthy", what="HEALTHY after recovery")
    if callbacks:  # RECOVERING is too brief to poll for; on_health_changed reports it
        # Callbacks run on their own time: wait for the report of the return to HEALTHY.
        await eventually(
            lambda: (
                bool(recording_callbacks.health) and recording_callbacks.health[-1][1] == "healthy"
            ),
            what="CB-003: on_health_changed reports the return to HEALTHY",
        )
        seen = [new for _, new in recording_callbacks.health]
        if ("degraded", "healthy") in recording_callbacks.health:
            raise AssertionError(
                f"CB-003: on_health_changed reported DEGRADED -> HEALTHY, leaving out the "
                f"RECOVERING between them: {recording_callbacks.health}"
            )
        assert "recovering" in seen, (
            f"CB-003: on_health_changed reported no RECOVERING on the way back to HEALTHY: "
            f"{recording_callbacks.health}"
        )
    assert (await memory_view(memory)).get("summary"), "recovery installs a summary"


@req("HLT-006")
@pytest.mark.parametrize("via", RELOADS)
async def test_reloading_a_degraded_state_brings_no_recovery_sooner(
    make_memory, scripted_summarizer, stm_provider, stm_store, via
):
    """``from_dict(to_dict())`` (or ``persist`` and ``hydrate``) again and again while
    DEGRADED: loading restarts the timer at most, so recovery attempts still come at most
    once per ``degraded_retry_interval_s``."""
    interval = 0.3
    cfg = config(full_zone_turns=1, retry_attempts=0, degraded_retry_interval_s=interval)
    key = MemoryKey("t", "u", f"reload-degraded-{uuid.uuid4().hex}")
    memory = await make_memory(cfg, key=key, summarizer=scripted_summarizer)
    await _degrade(memory, scripted_summarizer)
    reload = _reloader(memory, via, stm_store, stm_provider.key_for_storage(key))

    def loaded() -> None:
        assert memory.health.value in ("degraded", "recovering"), (
            f"SER-002: a DEGRADED state reloaded as {memory.health.value!r}"
        )

    reloads = await _calls_while_reloading(reload, scripted_summarizer, loaded, interval)
    attempts, elapsed = len(reloads.calls), reloads.elapsed
    assert attempts <= elapsed / interval + 1, (
        f"HLT-006: {attempts} recovery attempts in {elapsed:.2f}s of reloading a DEGRADED "
        f"state, with degraded_retry_interval_s={interval}: a load must not make one due"
    )
    soon = _made_due_by_a_load(reloads, interval)
    assert not soon, (
        f"HLT-006: recovery attempts {soon}s after a load of a DEGRADED state, with "
        f"degraded_retry_interval_s={interval} counted from the load: the load made them due"
    )


@req("HLT-006")
@pytest.mark.stm_capability("serialization")
async def test_reloading_a_state_saved_recovering_brings_no_attempt_sooner(
    make_memory, scripted_summarizer
):
    """A state saved while a recovery attempt ran (RECOVERING), loaded again and again:
    that attempt was the replaced state's, and the loaded one attempts at most once per
    ``degraded_retry_interval_s``, counted from the load, as a state loaded DEGRADED."""
    interval = 0.3
    cfg = config(full_zone_turns=1, retry_attempts=0, degraded_retry_interval_s=interval)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    await _degrade(memory, scripted_summarizer)
    scripted_summarizer.hold()
    await scripted_summarizer.wait_for_calls(2)  # the first recovery attempt, held
    await eventually(
        lambda: memory.health.value == "recovering",
        what="HLT-006: RECOVERING during an attempt (precondition)",
    )
    recovering = json_state(memory)
    scripted_summarizer.release()  # that attempt fails: DEGRADED again
    await eventually(
        lambda: memory.health.value == "degraded",
        what="HLT-006: DEGRADED after a failed attempt (precondition)",
    )

    async def reload() -> None:
        memory.from_dict(recovering)

    reloads = await _calls_while_reloading(reload, scripted_summarizer, lambda: None, interval)
    attempts, elapsed = len(reloads.calls), reloads.elapsed
    assert attempts <= elapsed / interval + 1, (
        f"HLT-006: {attempts} recovery attempts in {elapsed:.2f}s of loading a state saved "
        f"RECOVERING, with degraded_retry_interval_s={interval}: a load must not make one due"
    )
    soon = _made_due_by_a_load(reloads, interval)
    assert not soon, (
        f"HLT-006: recovery attempts {soon}s after a load of a state saved RECOVERING, with "
        f"degraded_retry_interval_s={interval} counted from the load: the load made them due"
    )


async def _failing_from_the_first_call(
    make_memory: Any, summarizer: ScriptedSummarizer, base: float
) -> tuple[Any, MemoryKey]:
    """A memory of a key of its own whose every call fails, its first call made (u0
    evicted), with ``retry_backoff_base_s=base`` and retries enough never to degrade."""
    cfg = config(full_zone_turns=1, retry_attempts=50, retry_backoff_base_s=base)
    key = MemoryKey("t", "u", f"retrying-{uuid.uuid4().hex}")
    memory = await make_memory(cfg, key=key, summarizer=summarizer)
    summarizer.fail_always("raise")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    return memory, key


@scenario("bound:lower", "bound:upper")
@req("HLT-002")
@pytest.mark.parametrize("via", RELOADS)
async def test_reloading_a_retry_state_brings_no_retry_sooner(
    make_memory, scripted_summarizer, stm_provider, stm_store, via
):
    """``from_dict(to_dict())`` again and again in RETRY: the next retry is timed from the
    load at the soonest, so retries still come at most once per backoff, and once the
    loads stop it comes by itself. ``retry_attempts`` is large: a memory that retried on
    every load stays in RETRY, and is caught here."""
    base = 0.3
    memory, key = await _failing_from_the_first_call(make_memory, scripted_summarizer, base)
    await eventually(
        lambda: memory.health.value == "retry", what="HLT-002: RETRY after a failure (precondition)"
    )
    reload = _reloader(memory, via, stm_store, stm_provider.key_for_storage(key))

    def loaded() -> None:
        assert memory.health.value == "retry", (
            f"SER-002: a RETRY state reloaded as {memory.health.value!r}"
        )

    started = time.monotonic()
    reloads = await _calls_while_reloading(reload, scripted_summarizer, loaded, base)
    retries, elapsed = len(reloads.calls), reloads.elapsed
    assert retries <= elapsed / base + 1, (
        f"HLT-002: {retries} retries in {elapsed:.2f}s of reloading a RETRY state, with "
        f"retry_backoff_base_s={base}: a load must not make a retry due"
    )
    soon = _made_due_by_a_load(reloads, base)
    assert not soon, (
        f"HLT-002: retries {soon}s after a load of a RETRY state, whose backoff of {base}s "
        "is timed from the load: the load made them due"
    )
    await eventually(
        lambda: any(t >= started for t in scripted_summarizer.call_times),
        what="HLT-002: the reloaded RETRY state retries by itself, with no add_turn",
    )


def _before_retry(times: list[float], made: int, backoff: float, what: str) -> None:
    """``made`` summarizer calls have been made, the last one failed, and the next, ``what``,
    is due ``backoff`` after that failure: the check acts in between. If the next has come,
    sooner than its backoff (with the timer's slack) is HLT-002; on time, the check was not
    scheduled during the whole backoff (a busy machine) and cannot conclude."""
    if len(times) == made:
        return
    gap = times[made] - times[made - 1]
    assert gap >= 0.75 * backoff, (
        f"HLT-002: {what} came {gap:.3f}s after the call before it; its backoff is {backoff}s"
    )
    not_concluded(
        f"{what} came on time, {gap:.3f}s after the call before it, before the check could "
        "act between the two: the check was not scheduled during the backoff"
    )


@scenario("bound:lower", "bound:upper")
@req("HLT-002")
@pytest.mark.parametrize("via", RELOADS)
async def test_a_state_reloaded_after_two_failures_waits_the_second_backoff(
    make_memory, scripted_summarizer, stm_provider, stm_store, via
):
    """After the first call and retry 1 failed, the next is retry 2, due ``2 * base`` after
    a failure; loaded then, the state keeps its count of failed calls and waits retry 2's
    backoff from the load, not retry 1's. (After one failure the two are the same, which is
    all the check above can tell.)"""
    base = 0.3  # retry 2 comes 0.6 s after retry 1 failed: room for a slow loop to reload
    memory, key = await _failing_from_the_first_call(make_memory, scripted_summarizer, base)
    await scripted_summarizer.wait_for_calls(2)  # the first call and retry 1, both failed
    await anyio.sleep(0.02)  # its failure recorded; retry 2 is 0.6 s away
    _before_retry(scripted_summarizer.call_times, 2, 2 * base, "retry 2")
    await _reloader(memory, via, stm_store, stm_provider.key_for_storage(key))()
    loaded = time.monotonic()
    await scripted_summarizer.wait_for_calls(3)
    waited = scripted_summarizer.call_times[2] - loaded
    # Timed from the load: 2 * base at the soonest. 1.5 * base leaves the timer its slack
    # and still tells retry 2's backoff from retry 1's.
    assert waited >= 1.5 * base, (
        f"HLT-002: the state loaded after two failed calls retried {waited:.3f}s after the "
        f"load; retry 2 waits retry_backoff_base_s * 2 = {2 * base}s, timed from the load"
    )
    # And not much more (retry 3's backoff would be twice that), as for a retry not loaded.
    assert_not_late(
        waited - (2 * base * 1.5 + patient(0.2)),
        loaded,
        scripted_summarizer.call_times[2],
        f"HLT-002: the state loaded after two failed calls retried {waited:.3f}s after the "
        f"load; retry 2 is due retry_backoff_base_s * 2 = {2 * base}s after it",
    )


@scenario("bound:lower")
@req("HLT-002")
@pytest.mark.stm_capability("serialization")
async def test_a_retry_state_loaded_over_one_due_sooner_waits_its_own_backoff(
    make_memory, scripted_summarizer
):
    """A state saved after two failed calls is loaded into a memory in RETRY after one
    failed call, whose own retry is due ``base`` after that failure: the loaded state waits
    retry 2's backoff, ``2 * base``, from the load. The replaced state's timer goes with
    it; that both are RETRY does not make it the loaded state's."""
    base = 0.3
    cfg = config(full_zone_turns=1, retry_attempts=50, retry_backoff_base_s=base)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    fresh = json_state(memory)
    scripted_summarizer.fail_always("raise")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await scripted_summarizer.wait_for_calls(2)  # the first call and retry 1
    await anyio.sleep(0.02)  # retry 1's failure recorded; retry 2 is 0.6 s away
    _before_retry(scripted_summarizer.call_times, 2, 2 * base, "retry 2")
    times = scripted_summarizer.call_times
    two_failures = json_state(memory)

    memory.from_dict(fresh)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await scripted_summarizer.wait_for_calls(3)  # fails: retry 1 is due base from now
    await eventually(
        lambda: memory.health.value == "retry", what="HLT-002: RETRY after a failure (precondition)"
    )
    _before_retry(times, 3, base, "the replaced state's retry 1")  # the load comes first
    memory.from_dict(two_failures)
    loaded = time.monotonic()
    await scripted_summarizer.wait_for_calls(4)
    waited = times[3] - loaded
    assert waited >= 1.5 * base, (
        f"HLT-002: a state saved after two failed calls, loaded into a memory whose retry "
        f"1 was due {base}s after its failure, retried {waited:.3f}s after the load; retry "
        f"2 waits retry_backoff_base_s * 2 = {2 * base}s, timed from the load"
    )


@scenario("bound:lower")
@req("HLT-002")
async def test_a_retry_waits_its_backoff_from_the_failure(make_memory):
    """Retry n is due ``base * 2**(n-1)`` after call n *failed*: a call that fails after
    running longer than the backoff is not retried the moment it fails."""
    base, runs = 0.1, 0.15
    starts: list[float] = []
    failures: list[float] = []
    done = False

    async def slow_failure(payload: Any) -> dict[str, str]:
        starts.append(time.monotonic())
        await anyio.sleep(runs)
        if done:  # a call still running after the check (a backend that leaves it) ends quietly
            return {"summary": "late"}
        failures.append(time.monotonic())
        raise RuntimeError("the summarizer failed after a while")

    cfg = config(full_zone_turns=1, retry_attempts=5, retry_backoff_base_s=base)
    memory = await make_memory(cfg, summarizer=slow_failure)
    try:
        await memory.add_turn(turn(0))
        await memory.add_turn(turn(1))
        await eventually(lambda: len(starts) >= 3, what="HLT-002: two retries by themselves")
    finally:
        done = True
    for n in (1, 2):
        waited, backoff = starts[n] - failures[n - 1], base * 2 ** (n - 1)
        assert waited >= backoff * 0.9, (
            f"HLT-002: retry {n} started {waited:.3f}s after call {n} failed; it is due "
            f"retry_backoff_base_s * 2**{n - 1} = {backoff}s after the failure"
        )


def _pending_users_saved(memory: Any) -> set[str] | None:
    """The users of the pending turns ``to_dict()`` records, when its format is one the kit
    can read (a ``pending`` list of turn records with ``user_message``); ``None`` else."""
    pending = memory.to_dict().get("pending")
    if not isinstance(pending, list) or not all(
        isinstance(t, dict) and isinstance(t.get("user_message"), str) for t in pending
    ):
        return None
    return {t["user_message"].rstrip("x") for t in pending}


@req("HLT-004")
async def test_degrading_moves_the_pending_turns_the_budget_hides_to_the_backlog(make_memory):
    """Pending turns the budget hides (BUD-004) are pending all the same: when the memory
    degrades they move to the backlog with the others, and the recovery is sent them."""
    gate = asyncio.Event()
    sent: list[list[str]] = []

    async def summarizer(payload: Any) -> dict[str, str]:
        sent.append(users(payload.get("turns")))
        if len(sent) == 1:
            await gate.wait()
            raise RuntimeError("the first call fails, after the turns were hidden")
        return {"summary": "recovered"}

    cfg = config(retry_attempts=0, degraded_retry_interval_s=0.1, **HIDING_BUDGET)
    memory = await make_memory(cfg, summarizer=summarizer)
    try:
        await hide_every_pending_turn(memory)  # u0 (sent to call 1, held) and u1 hidden
        kept = _pending_users_saved(memory)
        if kept is not None and not {"u0", "u1"} <= kept:
            raise PreconditionError(
                f"WM-006: the budget hid u0 and u1, and to_dict() holds {sorted(kept)} "
                "pending: they were deleted, not hidden"
            )
    finally:
        gate.set()
    await eventually(lambda: memory.health.value == "degraded", what="HLT-004: DEGRADED")
    # A turn evicted while DEGRADED fills the backlog whatever became of the hidden ones,
    # so that a recovery is due either way (HLT-006).
    await memory.add_turn(turn(3))
    try:
        await eventually(lambda: len(sent) >= 2, what="a recovery attempt")
    except AssertionError as exc:
        raise PreconditionError(f"HLT-006: no recovery attempt came by itself: {exc}") from None
    await eventually(lambda: memory.health.value == "healthy", what="HLT-006: HEALTHY again")
    await returns_within(memory.flush(), what="WM-007: flush() once HEALTHY")
    after = [u.rstrip("x") for call in sent[1:] for u in call]  # u2 is padded
    if sorted(after) == ["u0", "u1", "u2"] and after != ["u0", "u1", "u2"]:
        raise PreconditionError(f"WM-004: the backlog was sent out of order: {after}")
    assert after == ["u0", "u1", "u2"], (
        f"HLT-004: u0 and u1 were pending (hidden by the budget) when the memory degraded, "
        f"u2 was evicted while DEGRADED; the calls since were sent {after}: pending "
        f"turns move to the backlog, hidden or not"
    )


@scenario("bound:lower")
@req("HLT-002")
async def test_a_flush_in_retry_brings_no_retry_sooner(make_memory, scripted_summarizer):
    """``flush()`` waits for the retry the memory schedules; it does not make it due. A
    caller that flushes before each persist would otherwise turn the backoff into one
    retry per flush against a summarizer that is failing."""
    base = 0.5
    cfg = config(full_zone_turns=1, retry_attempts=3, retry_backoff_base_s=base)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_next(1)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await scripted_summarizer.wait_for_calls(1)
    try:
        await eventually(lambda: memory.health.value == "retry", what="RETRY")
    except AssertionError as exc:
        raise PreconditionError(f"HLT-002: a failed call did not move to RETRY: {exc}") from None
    with anyio.move_on_after(base / 2):
        await memory.flush()
    calls = len(scripted_summarizer.calls)
    assert calls == 1, (
        f"HLT-002: a flush() in RETRY brought retry 1 within {base / 2}s of the failure; "
        f"it is due retry_backoff_base_s = {base}s after it ({calls} calls)"
    )


@req("HLT-002", "HLT-008")
async def test_a_summarizer_raising_cancelled_error_is_a_failed_call(
    make_memory, scripted_summarizer
):
    """A client library may raise ``CancelledError`` from a request the memory did not
    cancel. That is one failed call: RETRY, a retry by itself, HEALTHY again; not a
    stopped worker and not an error for callers."""
    cfg = config(full_zone_turns=1, retry_attempts=3, retry_backoff_base_s=0.02)
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_next(1, mode="cancel")
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    await scripted_summarizer.wait_for_calls(2)
    await eventually(
        lambda: memory.health.value == "healthy", what="HEALTHY after the retry succeeded"
    )
    await memory.add_turn(turn(2))
    view = await memory_view(memory)
    assert view.get("summary"), f"the retried call's summary is installed: {view}"


@scenario("direction:reject")
@req("HLT-007")
@pytest.mark.parametrize("mode", INVALID_MODES)
async def test_invalid_output_is_a_failure(make_memory, scripted_summarizer, mode):
    cfg = config(
        full_zone_turns=1,
        summary_max_tokens=50,
        retry_backoff_base_s=30.0,
        summarizer_timeout_s=0.05,
    )
    memory = await make_memory(cfg, summarizer=scripted_summarizer)
    scripted_summarizer.fail_next(1, mode=mode)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))
    # A hung call is a failure by WM-008's rule (the timeout); the others by HLT-007's.
    rule = "WM-008: " if mode == "hang" else ""
    await eventually(lambda: memory.health.value == "retry", what=f"{rule}RETRY after {mode!r}")
    assert "summary" not in await memory_view(memory)


@req("HLT-008")
async def test_failures_never_reach_callers(make_memory, scripted_summarizer):
    memory = await make_memory(
        config(full_zone_turns=1, retry_attempts=1), summarizer=scripted_summarizer
    )
    scripted_summarizer.fail_always("raise")
    with anyio.fail_after(patient(5)):
        for i in range(6):
            await memory.add_turn(turn(i))
            await memory.get_llm_context()
            memory.estimate_tokens()
        await memory.flush()
