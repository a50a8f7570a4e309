"""The differential check: a backend driven by random operations, judged by the kit's model.

:class:`MemoryDifferential` applies each operation to the backend and to
:class:`~stm_conformance.model.SpecModel` (the spec as a small executable model, never
another backend) and, after every step, compares what a caller sees: the view, ``health``
and ``estimate_tokens()``. The first difference is blamed on one requirement, found from
where the model holds the turns involved and which rule put them there.

Model assumptions (what a backend may differ on without failing):

- Summarizer calls are *held* between steps: a call may start at any time, but it completes
  only inside the ``summarize``, ``fail_round`` and ``recover`` steps, which run the backend
  to rest (``flush()``, or HEALTHY after a recovery) before comparing. How a backend splits
  pending turns into calls is free: the scripted summary is a concatenation, so any split
  gives the same text.
- DEGRADED and RECOVERING compare equal (when a recovery attempt starts is timing) and the
  backlog never overflows here (``recovery_backlog_limit`` exceeds the run length), so the
  turns a recovery covers do not depend on when it started. Overflow is checked elsewhere.
- ``restore`` (with capability ``serialization``) round-trips the backend through its own
  ``to_dict()``/``from_dict()``; the model is unchanged by it (SER-002). ``reload`` loads
  the backend's own state into the same memory while a call may be in flight: that call
  belongs to the replaced state, and its outcome changes nothing (WM-004).
- The steps not drawn at random (``fail_once``, ``fail_recovery``, ``flush_degraded``,
  ``bad_state``, ``refuse``, ``close``, ``check_callbacks``) are for fixed scripts that
  need a retry or a recovery attempt held in flight (``test_differential.SCRIPTS``).
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import uuid
from collections.abc import Awaitable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from ._deadline import (
    _KIT_DIR,
    BLOCKED,
    CheckTimeout,
    close_runner,
    kit_probe,
    run_bounded,
    run_guarded,
)
from ._patience import patient
from .checks import config
from .contract import (
    ConversationTurn,
    MemoryBudgetExceeded,
    MemoryKey,
    ShortTermMemoryConfig,
    TrajectoryDigest,
    canonical_json,
)
from .model import ModelTurn, SpecModel
from .provider import Provider
from .scenarios import Tracker, track
from .scripted import CallbackError, FailureMode, RecordingCallbacks, ScriptedSummarizer

__all__ = [
    "DIFFERENTIAL_CONFIGS",
    "FAILURES",
    "Divergence",
    "MemoryDifferential",
    "differential_config",
    "requirement_of",
]

#: How long one backend operation may take inside the differential. Summarizer calls are
#: instant once released, so anything slower is waiting for something that never comes.
STEP_TIMEOUT_S = 2.0
#: Longest summary the scripted summarizer returns (well within ``summary_max_tokens``).
SUMMARY_CHARS = 200

_DEGRADED_FAMILY = frozenset({"degraded", "recovering"})


class Divergence(AssertionError):
    """The backend differs from the model; the message starts with the requirement ID."""

    def __init__(self, requirement: str, message: str) -> None:
        # Huge turns stay readable: any run of 121+ non-space characters is abbreviated.
        message = re.sub(r"\S{121,}", lambda m: f"{m[0][:60]}…({len(m[0])} chars)", message)
        super().__init__(f"{requirement}: {message}")
        self.requirement = requirement


def requirement_of(error: BaseException) -> str | None:
    """The requirement a :class:`Divergence` (or a step timeout) blames, if any."""
    return getattr(error, "requirement", None)


def differential_config(**overrides: Any) -> ShortTermMemoryConfig:
    """The base configuration of the differential, before the drawn variation."""
    params: dict[str, Any] = {
        "full_zone_turns": 2,
        "total_max_tokens": 160,
        "summary_max_tokens": 60,
        "retry_attempts": 1,
        "retry_backoff_base_s": 0.001,
        "degraded_retry_interval_s": 0.005,
        "recovery_backlog_limit": 256,
        # Calls held across steps must not time out however slow the steps (a loaded
        # machine, a slow estimator): no failure here is a hang, those are WM-008's checks.
        "summarizer_timeout_s": 300.0,
    }
    params.update(overrides)
    return config("rolling_summary", **params)


#: The configurations a run goes through: both truncate policies, windows of 0, 1 and 2
#: turns, with and without a token limit, digests rendered or not, callbacks that record
#: or raise (``"callbacks"``: they must change nothing, CB-004), and the ``error`` policy
#: with room enough that nothing is refused (refusals are BUD-006's checks).
DIFFERENTIAL_CONFIGS: tuple[dict[str, Any], ...] = (
    {},
    {"overflow_policy": "truncate_summary"},
    {"full_zone_turns": 0, "total_max_tokens": 120},
    {"full_zone_turns": 1, "include_trajectory_digest": False},
    {"total_max_tokens": 0, "overflow_policy": "truncate_summary"},
    {"full_zone_turns": 1, "total_max_tokens": 400, "overflow_policy": "truncate_summary"},
    {"full_zone_turns": 1, "callbacks": "raise"},
    {"overflow_policy": "error", "total_max_tokens": 1_000_000, "callbacks": "record"},
)

#: Every way a summarizer call fails without hanging (HLT-007): the memory must treat each
#: the same. Hangs need ``summarizer_timeout_s`` to pass and are WM-008's checks.
FAILURES: tuple[FailureMode, ...] = (
    "raise", "not_mapping", "no_summary", "non_string", "oversize", "cancel",
)  # fmt: skip

# Unfriendly text: non-ASCII, astral-plane, quotes and backslashes that JSON escapes, and
# empty strings. No newline in user text: summary lines are ``user:<text>``.
_USER_PAD = st.text(
    st.sampled_from(["x", "é", "🦜", '"', "\\", " ", "\t", "\u2028"]), max_size=40
) | st.just("é🦜" * 5_001)  # huge: one turn alone is over every limited budget here
_ASSISTANT = st.text(st.sampled_from(["a", "ß", "\U0001d518", "\n", "}", "'"]), max_size=30)
_DIGEST = st.none() | st.builds(
    TrajectoryDigest,
    tools_invoked=st.lists(st.sampled_from(["search", "café", "📎"]), max_size=2),
    observations_summary=st.sampled_from(["", "obs", "résumé"]),
    reasoning_summary=st.none() | st.just("why"),
    artifacts_refs=st.lists(st.just("ref-1"), max_size=1),
)


@dataclass
class _Step:
    """What the current step did, for blaming a difference found after it."""

    name: str
    #: The requirement that decides health after this step.
    health_rule: str = "HLT-008"
    #: For a failure: the requirement of what follows a failure once counted (retries and
    #: DEGRADED). A memory left in RETRY where the spec has DEGRADED counted the failure,
    #: whatever its kind, and did not retry it through: that is this rule's, not
    #: ``health_rule``'s (which says whether the output counts as a failure at all).
    retry_rule: str = ""
    #: Pending turns (by user text) that no call had been sent when calls were released:
    #: evicted while a call ran, they must survive its install (WM-003).
    unsent: set[str] = field(default_factory=set)
    #: A backend operation that did not return: (requirement, message).
    timeout: tuple[str, str] | None = None
    #: An illegal summarizer call the backend made: (requirement, message).
    problem: tuple[str, str] | None = None
    #: The requirement any difference after this step breaks (a refused operation must
    #: change nothing, whatever the difference).
    blame: str | None = None


class _StepTimeout(Exception):
    def __init__(self, what: str, stack: str) -> None:
        super().__init__(what)
        self.what, self.stack = what, stack


class MemoryDifferential(RuleBasedStateMachine):
    """Subclass with ``provider`` set, then run it with
    ``hypothesis.stateful.run_state_machine_as_test``."""

    provider: ClassVar[Provider]
    serialization: ClassVar[bool] = True
    #: Run with exactly this variant instead of drawing one of DIFFERENTIAL_CONFIGS.
    variant: ClassVar[Mapping[str, Any] | None] = None

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.key = MemoryKey("stm-conformance", "differential", uuid.uuid4().hex)
        self.summarizer = ScriptedSummarizer(max_chars=SUMMARY_CHARS, decide_on_release=True)
        self.summarizer.hold()
        self.sut: Any = None
        self.recorder: RecordingCallbacks | None = None
        self.tracker: Tracker | None = None
        self.model: SpecModel | None = None
        self.step = _Step("start")
        #: Index of the first summarizer call made since calls were last held.
        self.held_from = 0
        #: Summarizer calls already fed to the model.
        self.replayed = 0
        #: Calls in flight when ``from_dict`` replaced the state: their outcome belongs to
        #: the replaced state and changes nothing (WM-004).
        self.discarded: set[int] = set()
        #: How many summarizer calls had been made when ``reload`` last replaced the state.
        self.reloaded_at: int | None = None
        #: The model's summary when each call started, for calls that started during a step
        #: with no install in it (a call starting right after an install is sent that one).
        self.started_with: dict[int, str] = {}
        self.turns = 0
        #: Whether a summarizer call was made to fail (HLT-008 blames what then raises).
        self.failed = False
        #: ``close`` ended the memory: the view is no longer judged.
        self.closed = False
        #: What happened, for failure messages (hypothesis also prints its own steps).
        self.history: list[str] = []

    # -- plumbing ------------------------------------------------------------------------

    def _run(self, awaitable: Awaitable[Any]) -> Any:
        """Run on the machine's loop, within the check's hard deadline (``_deadline``)."""

        async def wrap() -> Any:
            return await awaitable

        return run_bounded(self.runner, wrap())

    def _bounded(self, coro: Coroutine[Any, Any, Any], what: str) -> Any:
        """Run one backend operation; raise :class:`_StepTimeout` (with the operation's
        stack) if it does not finish within :data:`STEP_TIMEOUT_S` (times
        ``--stm-patience``)."""

        async def go() -> Any:
            # A guard of its own: it decides, sooner than the time limit when it can, that
            # the operation waits forever, and the step blames the step's requirement. A
            # blocked loop is no timeout of the step: the check's guard reports it.
            try:
                return await run_guarded(
                    coro, seconds=patient(STEP_TIMEOUT_S), what="the operation", probe=kit_probe
                )
            except CheckTimeout as exc:
                if BLOCKED in str(exc):
                    raise
                raise _StepTimeout(what, str(exc)) from None

        return self._run(go())

    def _note_call_starts(self) -> None:
        assert self.model is not None
        for index in range(len(self.summarizer.calls)):
            self.started_with.setdefault(index, self.model.summary)

    def _hold(self) -> None:
        self.summarizer.succeed()
        self.summarizer.hold()
        self.held_from = len(self.summarizer.calls)

    def _sent_while_held(self) -> set[str]:
        return {
            str(t.get("user"))
            for call in self.summarizer.calls[self.held_from :]
            for t in call.get("turns") or []
            if isinstance(t, Mapping)
        }

    def _replay(self) -> None:
        """Feed the model every summarizer call that succeeded since the last replay, in
        call order; the first illegal one is this step's finding."""
        assert self.model is not None
        calls, outputs = self.summarizer.calls, self.summarizer.outputs
        while self.replayed < len(calls):
            index = self.replayed
            if index in self.discarded:
                self.replayed += 1
                continue
            if outputs[index] is None:
                if index < len(calls) - 1 or not self.summarizer.held:
                    self.replayed += 1  # failed or cancelled: nothing to install
                    continue
                return  # still running (held)
            self.replayed += 1
            problem = self.model.check_call(calls[index], self.started_with.get(index))
            if problem is not None:
                problem = self._stale_turns_skipped(calls[index]) or problem
                self.step.problem = self.step.problem or self._after_reload(index, problem)
                return
            self.model.install(calls[index], str(outputs[index]))

    def _stale_outcomes(self) -> list[tuple[list[str], str]]:
        """The turns and summary of each call ``from_dict`` made stale (in flight when it
        replaced the state) that returned a summary: one the backend must not install."""
        calls, outputs = self.summarizer.calls, self.summarizer.outputs
        return [
            (_users(calls[i].get("turns")), str(outputs[i]))
            for i in sorted(self.discarded)
            if i < len(outputs) and outputs[i] is not None
        ]

    def _stale_turns_skipped(self, payload: Mapping[str, Any]) -> tuple[str, str] | None:
        """WM-004's, when a call leaves out the oldest turns waiting and those are the turns
        a call ``from_dict`` made stale was sent: their summary went into the loaded state."""
        assert self.model is not None
        sent = _users(payload.get("turns"))
        waiting = [t.rendered["user"] for t in self.model.batch()]
        stale = {u for users, _ in self._stale_outcomes() for u in users}
        skipped = 0
        while skipped < len(waiting) and waiting[skipped] in stale:
            skipped += 1
        if not (skipped and sent and waiting[skipped : skipped + len(sent)] == sent):
            return None
        return "WM-004", (
            f"a call was sent {sent}, leaving out {waiting[:skipped]}, which only a call in "
            "flight when from_dict() replaced the state was sent: that call's outcome "
            "belongs to the replaced state and must not change the loaded one"
        )

    def _stale_summary_shown(self, view: Any) -> tuple[str, str] | None:
        """WM-004's, when the view shows (whole, or shortened to its newest text) the
        summary of a call ``from_dict`` made stale instead of the spec's."""
        assert self.model is not None
        inner = dict(view).get("conversation_memory") or {}
        shown = inner.get("summary") if isinstance(inner, Mapping) else None
        if not isinstance(shown, str) or not shown or shown == self.model.summary:
            return None
        for users, summary in self._stale_outcomes():
            if summary.endswith(shown) and not self.model.summary.endswith(shown):
                return "WM-004", (
                    f"the view shows the summary of a call (sent {users}) that was in flight "
                    "when from_dict() replaced the state: its outcome belongs to the replaced "
                    "state and must not change the loaded one"
                )
        return None

    def _after_reload(self, index: int, problem: tuple[str, str]) -> tuple[str, str]:
        """``problem`` with call ``index``, and the cause when an earlier call made since
        the last reload succeeded with the same first turn: the replaced state's call reached
        the summarizer after ``from_dict`` returned, and the loaded state sent its turns
        again. (A failed call's turns are sent again by right.)"""
        calls, outputs = self.summarizer.calls, self.summarizer.outputs
        if self.reloaded_at is None or index < self.reloaded_at:
            return problem
        first = _users(calls[index].get("turns"))[:1]
        twice = [
            earlier
            for earlier in range(self.reloaded_at, index)
            if first
            and outputs[earlier] is not None
            and _users(calls[earlier].get("turns"))[:1] == first
        ]
        if not twice:
            return problem
        requirement, why = problem
        return requirement, (
            f"{why}. Call #{twice[0] + 1}, made after from_dict() returned, succeeded with the "
            f"same first turn as this one (call #{index + 1}): a call the replaced state began "
            "must not reach the summarizer once from_dict() has returned, since the loaded "
            "state sends those turns itself"
        )

    def _settle(self, requirement: str, what: str) -> None:
        """Release calls and flush until the backend rests: the model has nothing pending
        (each flush covers what was pending when it started) or a flush stops returning."""
        assert self.model is not None
        for _ in range(8):
            try:
                early = self._bounded(self._flush_and_look(self._pending_in_model()), what)
            except _StepTimeout as exc:
                # Turns evicted while the held call ran that no call was sent since: flush()
                # waits for them because they were lost at the install (WM-003).
                lost = self.step.unsent - self._sent_while_held()
                self.step.timeout = (
                    (
                        "WM-003",
                        f"{exc.what}: no call was sent {sorted(lost)}, evicted while "
                        "the previous call ran; they must stay pending until a summary covers them",
                    )
                    if lost
                    else (requirement, f"{exc.what}\n{exc.stack}")
                )
                return
            except Exception as exc:
                self._raised(exc, "flush()")
                return
            if early:
                self.step.problem = self.step.problem or (
                    "WM-007",
                    f"flush() returned while turns pending when it was called were still "
                    f"pending and the memory was not degraded: {sorted(early)}",
                )
                return
            self._replay()
            if self.step.problem or not self.model.pending or self.model.degraded:
                return

    def _watched(self, cfg: ShortTermMemoryConfig) -> Any:
        """The summarizer for a new instance, watched for the coverage table."""
        self.tracker = track(cfg)
        if self.tracker is None:
            return self.summarizer
        return self.tracker.summarizer(self.summarizer)

    def _note(self, operation: str, *args: Any) -> None:
        """Tell the coverage tracker of an operation about to run on the backend."""
        if self.tracker is not None:
            self.tracker.before(operation, args)

    def _pending_in_model(self) -> set[str]:
        """The turns pending now, hidden by the budget or not (the view shows only some)."""
        assert self.model is not None
        return {t.rendered["user"] for t in self.model.pending}

    async def _flush_and_look(self, before: set[str]) -> set[str]:
        """``flush()``, with held calls released once it is waiting for them, then (before
        anything else runs) the turns of ``before`` (pending when it was called) that are
        still pending in a memory that is not degraded (WM-007): shown as pending, or sent
        to a call still running (hidden turns are not in the view, but are pending too)."""
        self._note("flush")
        flushing = asyncio.ensure_future(self.sut.flush())
        await asyncio.sleep(0)  # flush() starts while the call in flight is held
        self.summarizer.release()
        await flushing
        if str(self.sut.health.value) in _DEGRADED_FAMILY:
            return set()
        # A turn sent to no call at all may have been lost some other way: the view tells.
        # A call of a replaced state counts too: while it runs, the loaded state's own call
        # for the same turns cannot have run (WM-004).
        running = {
            str(t.get("user"))
            for index, call in enumerate(self.summarizer.calls)
            if not self.summarizer.ended[index]
            for t in call.get("turns") or []
            if isinstance(t, Mapping)
        }
        shown = _pending_users(await self.sut.get_llm_context())
        return before & (shown | running)

    # -- rules ---------------------------------------------------------------------------

    @initialize(drawn=st.sampled_from(DIFFERENTIAL_CONFIGS))
    def create(self, drawn: dict[str, Any]) -> None:
        variant = dict(self.variant if self.variant is not None else drawn)
        callbacks = variant.pop("callbacks", None)
        if callbacks is not None:
            self.recorder = RecordingCallbacks(raise_errors=callbacks == "raise")
            variant.update(self.recorder.config_kwargs())
        cfg = differential_config(**variant)
        self.model = SpecModel(cfg)
        self.history.append(f"create({self.variant if self.variant is not None else drawn})")
        self.sut = self._run(self.provider.create(cfg, self.key, self._watched(cfg)))
        if self.tracker is not None:
            self.tracker.attach(self.sut)

    @rule(pad=_USER_PAD, assistant=_ASSISTANT, digest=_DIGEST)
    def add(self, pad: str, assistant: str, digest: TrajectoryDigest | None) -> None:
        assert self.model is not None
        user = f"u{self.turns}:{pad}"
        self.turns += 1
        t = ConversationTurn(user, assistant, digest)
        self.step = _Step("add_turn", health_rule="HLT-008")
        self.history.append(f"add({user!r})")
        self.model.add(t)

        self._note("add_turn", t)

        async def go() -> None:
            await self.sut.add_turn(t)
            await asyncio.sleep(0)  # let a summarizer call start (it is held)

        try:
            self._bounded(go(), "add_turn did not return while a summarizer call was held")
        except _StepTimeout as exc:
            self.step.timeout = ("WM-001", f"{exc.what}\n{exc.stack}")
        except Exception as exc:
            self._raised(exc, "add_turn")
        self._note_call_starts()

    @precondition(lambda self: self.model is not None and not self.model.degraded)
    @rule()
    def summarize(self) -> None:
        assert self.model is not None
        sent = self._sent_while_held()
        unsent = {t.rendered["user"] for t in self.model.pending} - sent
        self.step = _Step("summarize", health_rule="HLT-004", unsent=unsent)
        self.history.append("summarize()")
        try:
            self._settle("WM-007", "flush() did not return although every call succeeded")
        finally:
            self._hold()
        self._replay()

    @precondition(lambda self: self.model is not None and not self.model.degraded)
    @rule(mode=st.sampled_from(FAILURES))
    def fail_round(self, mode: FailureMode = "raise") -> None:
        assert self.model is not None
        # A health that did not change after invalid output: it was not taken as a failure.
        self.step = _Step(
            "fail_round", health_rule=_failure_rule(mode, "HLT-004"), retry_rule="HLT-004"
        )
        self.failed = True
        self.history.append(f"fail_round({mode!r})")
        before = self._pending_in_model()
        self.model.fail()
        self.summarizer.fail_always(mode)
        try:
            early = self._bounded(
                self._flush_and_look(before),
                "flush() did not return while every call failed",
            )
            if early:
                self.step.problem = (
                    "WM-007",
                    f"flush() returned while turns pending when it was called were still "
                    f"pending and the memory was not degraded: {sorted(early)}",
                )
        except _StepTimeout as exc:
            self.step.timeout = ("HLT-004", f"{exc.what}\n{exc.stack}")
        except Exception as exc:
            self._raised(exc, "flush()")
        finally:
            self._hold()
        self.replayed = len(self.summarizer.calls)  # every call of this round failed

    @precondition(lambda self: self.model is not None and self.model.degraded)
    @rule()
    def recover(self) -> None:
        assert self.model is not None
        if not self.model.backlog:
            return  # nothing to recover with: both stay degraded
        self.step = _Step("recover", health_rule="HLT-006")
        self.history.append("recover()")
        self.summarizer.release()

        async def healthy() -> None:
            while self.sut.health.value != "healthy":  # noqa: ASYNC110 - polling a property
                await asyncio.sleep(0.002)

        try:
            self._bounded(healthy(), "no recovery to HEALTHY although the summarizer succeeds")
            self._replay()
            self._settle("WM-007", "flush() did not return after recovery")
        except _StepTimeout as exc:
            self.step.timeout = ("HLT-006", exc.what)
        finally:
            self._hold()
        self._replay()

    @precondition(lambda self: self.serialization and self.model is not None)
    @rule()
    def restore(self) -> None:
        assert self.model is not None
        self.step = _Step("restore", health_rule="SER-002")
        self.history.append("restore()")
        state = self._state()
        if state is None:
            return
        cfg = self.model.config
        # The new instance gets a summarizer of its own: a call the old one left behind
        # (it should have none after closing, CON-003) cannot reach the new one's record.
        self.summarizer.release()
        self.summarizer = ScriptedSummarizer(max_chars=SUMMARY_CHARS, decide_on_release=True)
        self.summarizer.hold()
        self.held_from = self.replayed = 0
        self.reloaded_at = None
        self.discarded = set()
        self.started_with = {}

        async def go() -> Any:
            fresh = await self.provider.create(cfg, self.key, self._watched(cfg))
            if self.tracker is not None:
                self.tracker.attach(fresh)
                self.tracker.before("from_dict", (state,))
            fresh.from_dict(state)
            await self.provider.dispose(self.sut)
            return fresh

        self.sut = self._run(go())
        self._note_call_starts()

    @precondition(lambda self: self.serialization and self.model is not None)
    @rule()
    def reload(self) -> None:
        """``from_dict(to_dict())`` into the same memory, with any call still in flight:
        the state loaded is the state it had, so nothing observable changes (SER-002), and
        the call in flight stays the only one (WM-004, checked by the calls it makes)."""
        assert self.model is not None
        self.step = _Step("reload", health_rule="SER-002")
        self.history.append("reload()")
        state = self._state()
        if state is None:
            return
        self._note("from_dict", state)
        self.sut.from_dict(state)
        self.reloaded_at = len(self.summarizer.calls)
        self.discarded.update(range(self.replayed, len(self.summarizer.calls)))
        self._run(asyncio.sleep(0))
        self._note_call_starts()

    def _raised(self, exc: Exception, what: str) -> None:
        """An operation raised: a callback's exception breaks CB-004; after summarizer
        failures, any other breaks HLT-008; before any, the exception is the finding."""
        if isinstance(exc, CallbackError):
            self.step.problem = self.step.problem or ("CB-004", f"{what} raised {exc!r}")
            return
        if self.model is not None and self.model.health == "healthy" and not self.failed:
            raise exc
        self.step.problem = self.step.problem or (
            "HLT-008",
            f"{what} raised {exc!r} after summarizer failures",
        )

    def _state(self) -> dict[str, Any] | None:
        """``to_dict()`` through JSON; ``None``, with the step's problem noted, unless it is
        JSON data with an integer ``version`` (SER-001)."""
        self._note("to_dict")
        try:
            state = json.loads(json.dumps(self.sut.to_dict()))
        except (TypeError, ValueError) as exc:
            self.step.problem = ("SER-001", f"to_dict() is not JSON data: {exc}")
            return None
        version = state.get("version") if isinstance(state, dict) else None
        if not isinstance(state, dict) or type(version) is not int:
            self.step.problem = ("SER-001", f"to_dict() has no integer version: {version!r}")
            return None
        return state

    # -- steps of the fixed scripts (test_differential), not drawn at random ---------------

    def bad_state(self) -> None:
        """``from_dict`` of a malformed state (the memory's own, its ``version`` made a
        string) raises ``ValueError`` and changes nothing, whatever runs (SER-003)."""
        self.step = _Step("bad_state", health_rule="SER-003", blame="SER-003")
        self.history.append("bad_state()")
        state = self._state()
        if state is None:
            return
        state["version"] = "two"
        self._note("from_dict", state)
        try:
            self.sut.from_dict(state)
        except ValueError:
            pass
        except Exception as exc:
            self.step.problem = ("SER-003", f"from_dict of a malformed state raised {exc!r}")
        else:
            self.step.problem = ("SER-003", "from_dict accepted a state whose version is 'two'")

    def refuse(self) -> None:
        """Under policy ``error``, ``add_turn`` of a huge turn that the view would show is
        refused with ``MemoryBudgetExceeded`` and changes nothing (BUD-006). Where the view
        would not show it (DEGRADED with no window) the step does nothing."""
        assert self.model is not None
        turn = ConversationTurn(f"u{self.turns}:{'é🦜' * 5_001}", "", None)
        after = copy.deepcopy(self.model)
        after.add(turn)
        limit = self.model.config.budget.total_max_tokens
        if not (limit and after.tokens() > limit):
            # Accepted, and it would reach the view only through a later summary, which the
            # error policy may refuse to install (BUD-007): outside the model. Not tried.
            return
        self.step = _Step("refuse", health_rule="BUD-006", blame="BUD-006")
        self.history.append("refuse()")
        self._note("add_turn", turn)
        try:
            self._bounded(self.sut.add_turn(turn), "add_turn of a turn over the budget")
        except MemoryBudgetExceeded:
            return
        except _StepTimeout as exc:
            # What add_turn could wait for is a summarizer call, and calls are held here:
            # one that does not return waits for the summarizer (WM-001), refused or not.
            rule = "WM-001" if self.summarizer.waiting else "BUD-006"
            self.step.timeout = (rule, f"{exc.what}\n{exc.stack}")
        except Exception as exc:
            self.step.problem = ("BUD-006", f"add_turn over the budget raised {exc!r}")
        else:
            self.step.problem = ("BUD-006", "add_turn accepted a turn over the whole budget")

    def check_callbacks(self) -> None:
        """What the callbacks received, once they are all done: every turn added once, in
        order (CB-001); one ``on_summary_updated`` per installed summary, with the summaries
        the calls returned (CB-002); the health transitions as a chain from ``healthy`` to
        the health now, none from a state to itself (CB-003)."""
        recorder, model = self.recorder, self.model
        if recorder is None or model is None:
            return
        self._run(recorder.settle(quiet_s=0.01))
        # A health change may show before its callback is queued (a backend that reports
        # it once its store has answered): the callbacks get until they reach the health
        # shown, within the kit's patience. Ones that never do still fail below.
        waited = 0.0
        while waited < patient(1.0) and _chain_end(recorder.health) != self.sut.health.value:
            self._run(asyncio.sleep(0.01))
            waited += 0.01
        users = [str(getattr(t, "user_message", t)) for t in recorder.turns]
        added = [t.rendered["user"] for t in model.turns]
        if users != added:
            raise Divergence("CB-001", f"on_turn_added received {users}; added: {added}")
        installed = [new for _, new in recorder.summaries]
        if len(installed) != len(model.installed):
            raise Divergence(
                "CB-002",
                f"on_summary_updated ran {len(installed)} times for {len(model.installed)} "
                "installed summaries",
            )
        chain, now = ["healthy"], str(self.sut.health.value)
        for old, new in recorder.health:
            if old == new or old != chain[-1]:
                raise Divergence("CB-003", f"health callbacks {recorder.health} are no chain")
            chain.append(new)
        if chain[-1] != now:
            raise Divergence(
                "CB-003", f"health callbacks {recorder.health} end in {chain[-1]}, not {now}"
            )

    def _held_call(self, requirement: str, what: str) -> bool:
        """Wait (bounded) until a summarizer call of the current state is held (one left
        from before a ``from_dict`` is let go first); False, with the step's timeout noted,
        if none starts."""
        calls = self.summarizer.calls
        stale = self.summarizer.waiting and len(calls) - 1 in self.discarded
        if self.summarizer.waiting and not stale:
            return True
        # Decided now, before the loop runs again: a call the memory starts meanwhile is
        # the one to hold, never one to let go.
        started = len(calls)

        async def go() -> None:
            if stale:  # the replaced state's call: let it end
                self.summarizer.let_one_through()
            while not (self.summarizer.waiting and len(calls) > started):
                await self.summarizer.wait_for_calls(len(calls) + 1, STEP_TIMEOUT_S)

        try:
            self._bounded(go(), what)
        except (_StepTimeout, TimeoutError) as exc:
            self.step.timeout = (requirement, f"{what}: {exc}")
            return False
        return True

    def _fail_held_call(self, mode: FailureMode, requirement: str, what: str) -> None:
        """The held call fails in ``mode``; the next call the memory makes is held."""
        self.summarizer.fail_next(1, mode)
        calls = len(self.summarizer.calls)
        self.summarizer.let_one_through()

        async def go() -> None:
            await self.summarizer.wait_for_calls(calls + 1, STEP_TIMEOUT_S)

        try:
            self._bounded(go(), what)
        except (_StepTimeout, TimeoutError) as exc:
            self.step.timeout = (requirement, f"{what}: {exc}")
        self._note_call_starts()

    def fail_once(self, mode: FailureMode = "raise") -> None:
        """The call in flight fails once in ``mode``; the retry the memory schedules by
        itself is held, so the memory stays in RETRY (HLT-002, HLT-003)."""
        assert self.model is not None
        self.step = _Step(
            "fail_once", health_rule=_failure_rule(mode, "HLT-002"), retry_rule="HLT-002"
        )
        self.failed = True
        self.history.append(f"fail_once({mode!r})")
        self.model.fail_once()
        if self.model.health != "retry":
            return  # nothing pending, so no call to fail
        if self._held_call("WM-002", "no summarizer call started for the pending turns"):
            self._fail_held_call(mode, "HLT-002", "no retry started after a failed call")

    def fail_recovery(self, mode: FailureMode = "raise") -> None:
        """A recovery attempt fails in ``mode``: still DEGRADED, with the next attempt the
        memory schedules by itself held (HLT-006)."""
        assert self.model is not None and self.model.degraded
        self.step = _Step("fail_recovery", health_rule=_failure_rule(mode, "HLT-006"))
        self.failed = True
        self.history.append(f"fail_recovery({mode!r})")
        if not self.model.backlog:
            return  # nothing to recover with: no attempt
        if self._held_call("HLT-006", "no recovery attempt started while DEGRADED"):
            self._fail_held_call(mode, "HLT-006", "no recovery attempt after a failed one")

    def flush_degraded(self) -> None:
        """``flush()`` while DEGRADED (a recovery attempt may be held) returns at once
        (WM-007): nothing is pending."""
        assert self.model is not None and self.model.degraded
        self.step = _Step("flush_degraded", health_rule="HLT-006")
        self.history.append("flush_degraded()")

        async def go() -> None:
            self._note("flush")
            await self.sut.flush()

        try:
            self._bounded(go(), "flush() did not return while DEGRADED")
        except _StepTimeout as exc:
            self.step.timeout = ("WM-007", f"{exc.what}\n{exc.stack}")
        except Exception as exc:
            self._raised(exc, "flush()")

    def close(self) -> None:
        """``aclose()`` with a call in flight (held): it returns and leaves no task of the
        memory running (CON-003)."""
        self.step = _Step("close", health_rule="CON-003")
        self.history.append("close()")
        if not hasattr(self.sut, "aclose"):
            return
        self._held_call("CON-003", "no summarizer call in flight to close over")

        async def go() -> set[asyncio.Task[Any]]:
            self._note("aclose")
            await self.sut.aclose()
            # Right away: a task cancelled but not yet finished when aclose() returns is
            # still running.
            return {t for t in asyncio.all_tasks() if not t.done() and not _kit_task(t)}

        try:
            left = self._bounded(go(), "aclose() did not return while a call was in flight")
        except _StepTimeout as exc:
            self.step.timeout = ("CON-003", f"{exc.what}\n{exc.stack}")
            return
        if left:
            self.step.problem = ("CON-003", f"tasks still running after aclose(): {left}")
        self.summarizer.release()
        self.closed = True

    # -- judging -------------------------------------------------------------------------

    @invariant()
    def agrees_with_the_model(self) -> None:
        if self.model is None:
            return
        if self.closed:
            if self.step.problem or self.step.timeout:
                requirement, message = self.step.problem or self.step.timeout  # type: ignore[misc]
                raise Divergence(requirement, message)
            return

        async def observe() -> tuple[Any, str, int]:
            return (
                dict(await self.sut.get_llm_context()),
                str(self.sut.health.value),
                self.sut.estimate_tokens(),
            )

        view, health, tokens = self._run(observe())
        # An add_turn that did not return explains whatever follows it; a flush that did
        # not return is judged after the view, which tells what it was waiting for.
        stuck = self.step.timeout if self.step.name in ("add_turn", "refuse") else None
        found = self.step.problem or stuck
        if found is None and (found := diagnose(self.model, view, health, tokens, self.step)):
            found = self._stale_summary_shown(view) or found
            if found[0] == "BUD-010":
                found = self._lost_behind_shown(view) or found
        found = found or self.step.timeout
        if found is not None:
            requirement, message = found
            # A refused operation that did not return is judged as its timeout says (a
            # held summarizer call it waited for is WM-001's); any other difference after
            # it is the refusal's.
            if self.step.blame is not None and found is not self.step.timeout:
                requirement = self.step.blame
                message = f"after a refused {self.step.name}, nothing may change: {message}"
            raise Divergence(
                requirement,
                f"{message}\n  after: {' '.join(self.history[-12:])}"
                f"\n  backend view: {canonical_json(view)}"
                f"\n  spec view:    {canonical_json(self.model.view())}"
                f"\n  backend health: {health}; spec: {self.model.health}",
            )

    def _lost_behind_shown(self, view: Mapping[str, Any]) -> tuple[str, str] | None:
        """WM-002, when the backend shows pending turns older than one the model holds
        pending (and hides: it does not fit), because that turn is not pending at all.

        The view alone cannot tell a turn lost (WM-002) from a visible run that skips a
        turn too long to show (BUD-010); the summarizer can. Released, and flushed, the
        memory sends every turn it holds pending (WM-007): a skipped turn no call carries
        was not pending. The check ends with this finding either way, so the flush's
        changes are of no matter."""
        assert self.model is not None
        if self.model.health != "healthy":
            return None
        shown = _users(dict(view.get("conversation_memory") or {}).get("pending_turns"))
        pending = [str(t.rendered["user"]) for t in self.model.pending]
        if not shown or shown[0] not in pending:
            return None
        skipped = [u for u in pending[pending.index(shown[0]) :] if u not in shown]
        if not skipped:
            return None
        try:
            self._bounded(self._flush_and_look(set()), "flush() to see which turns are pending")
        except Exception:
            return None  # the flush tells nothing: BUD-010's finding stands
        sent = self._sent_while_held()  # the call in flight, and the flush's
        lost = [u for u in skipped if u not in sent]
        if not lost or str(self.sut.health.value) != "healthy":
            return None
        return "WM-002", (
            f"evicted turns {lost} are not pending (lost before any summary): not shown, "
            f"though older pending turns are ({shown[:2]}...), and no summarizer call of a "
            "flush carried them"
        )

    def teardown(self) -> None:
        self.summarizer.release()
        try:
            if self.sut is not None:
                self._bounded(self.provider.dispose(self.sut), "closing the memory")
        except _StepTimeout:
            pass  # CON-003 is judged by its own check; the run still ends
        finally:
            close_runner(self.runner)


# -- attribution ----------------------------------------------------------------------------


def _kit_task(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` runs the kit's own code (the step running the operation)."""
    code = getattr(task.get_coro(), "cr_code", None)
    return code is not None and str(Path(code.co_filename).resolve()).startswith(_KIT_DIR)


def _failure_rule(mode: FailureMode, rule: str) -> str:
    """The requirement a health that did not follow a failure in ``mode`` breaks: a summary
    over the limit and other invalid output not taken as failures are BUD-007 and HLT-007;
    an exception is ``rule``'s."""
    return {"raise": rule, "oversize": "BUD-007"}.get(mode, "HLT-007")


def diagnose(
    model: SpecModel, view: Any, health: str, tokens: int, step: _Step
) -> tuple[str, str] | None:
    """The requirement the first difference between backend and model breaks, and why."""
    try:
        text = canonical_json(view)
    except (TypeError, ValueError) as exc:
        return "STR-003", f"get_llm_context() is not JSON data: {exc}"
    expected_tokens = model.estimate(text)
    if tokens != expected_tokens:
        return "BUD-008", (
            f"estimate_tokens() is {tokens}, the estimator on the view's canonical JSON gives "
            f"{expected_tokens}"
        )
    limit = model.config.budget.total_max_tokens
    if limit and tokens > limit:
        return "BUD-001", f"the view has {tokens} tokens, over total_max_tokens={limit}"
    inner = view.get("conversation_memory") if isinstance(view, Mapping) else None
    if set(view) != {"conversation_memory"} or not isinstance(inner, Mapping):
        return "STR-003", "the view is not {'conversation_memory': {...}}"
    inner = dict(inner)
    window = model.config.budget.full_zone_turns
    if len(inner.get("recent_turns") or []) > window:
        return "BUD-003", f"{len(inner['recent_turns'])} recent turns, full_zone_turns={window}"
    seen = "degraded" if health in _DEGRADED_FAMILY else health
    if seen != model.health:
        rule = step.health_rule
        if step.retry_rule and health == "retry" and model.health == "degraded":
            rule = step.retry_rule
        elif seen == "degraded" and model.health == "retry" and rule in ("HLT-002", "HLT-004"):
            # Taken as a failure, but DEGRADED before the first attempt and every retry failed
            rule = "HLT-004"
        return rule, f"health is {health!r} after {step.name}; the spec: {model.health}"
    spec = model.view()["conversation_memory"]
    if inner == spec:
        return None
    if model.degraded and {"summary", "pending_turns"} & set(inner):
        if health == "recovering":  # the view of section 0 is STR-003's; HLT-004's DEGRADED
            return "STR-003", "a RECOVERING memory must show recent turns only"
        return "HLT-004", "a DEGRADED memory must show recent turns only"
    if set(inner) - {"summary", "pending_turns", "recent_turns"}:
        return "STR-003", f"unexpected keys {sorted(set(inner) - set(spec))} in the view"
    # Which keys are present is part of the shape, whatever their content: an empty summary
    # or pending list is left out, recent_turns never is.
    empty = sorted(k for k in ("summary", "pending_turns") if k in inner and not inner[k])
    if empty or "recent_turns" not in inner:
        return "STR-003", (
            f"the view's keys are {sorted(inner)}, the spec's {sorted(spec)}: recent_turns "
            "is always present, summary and pending_turns only when not empty"
        )
    if inner.get("summary", "") != spec.get("summary", ""):
        return _summary_difference(model, str(inner.get("summary", "")), step)
    if inner.get("recent_turns", []) != spec.get("recent_turns", []):
        found = _recent_difference(model, inner)
    else:
        found = _pending_difference(model, inner, step)
    if found[0] == "STR-004" and step.name in ("reload", "restore"):
        # Rendered as the spec has it before the load (or an earlier step would have
        # differed): the turns loaded are not the turns saved.
        return "SER-002", f"after {step.name}: {found[1]}, unlike before it"
    return found


def _pending_users(context: Any) -> set[str]:
    inner = dict(context).get("conversation_memory") or {}
    return set(_users(inner.get("pending_turns")))


def _users(turns: Any) -> list[str]:
    return [str(t.get("user")) if isinstance(t, Mapping) else repr(t) for t in turns or []]


def _summary_users(summary: str) -> list[str]:
    lines = summary.split("\n")
    if len(summary) >= SUMMARY_CHARS:
        lines = lines[1:]  # clipped to its newest text: the first line may be partial
    return [line.removeprefix("user:") for line in lines if line.startswith("user:")]


def _summary_difference(model: SpecModel, summary: str, step: _Step) -> tuple[str, str]:
    expected = model.summary
    if model.summary_size(summary) > model.config.budget.summary_max_tokens:
        return "BUD-002", f"the summary has {model.summary_size(summary)} tokens"
    trim_rule = (
        "BUD-005" if model.config.budget.overflow_policy == "truncate_summary" else "BUD-004"
    )
    if model.health == "retry" and not summary:
        return "HLT-003", f"RETRY must show the last good summary, {expected!r}; it shows none"
    limited = bool(model.config.budget.total_max_tokens)  # else the budget shortens nothing
    if limited and expected.endswith(summary):
        return trim_rule, "the summary was shortened more than the budget needs"
    if limited and summary.endswith(expected):
        return trim_rule, "the summary was not shortened (newest text kept) as the budget needs"
    if step.name in ("reload", "restore"):
        # The summary agreed before the load (each step is checked): the load changed it.
        return "SER-002", (
            f"after {step.name} the summary is {summary!r}, unlike before it: {expected!r}"
        )
    got, want = _summary_users(summary), _summary_users(expected)
    by_user = {t.rendered["user"]: t for t in model.turns}
    missing = [u for u in want if u not in got]
    lost = [by_user[u] for u in missing if u in by_user]
    if any(t.was_hidden for t in lost):
        return "WM-006", (
            f"turns hidden by the budget never reached a summary (deleted, not hidden): "
            f"{[t.rendered['user'] for t in lost if t.was_hidden]}"
        )
    if any(u in step.unsent for u in missing):
        return "WM-003", (
            f"turns evicted while a call ran were removed by its install and never summarized: "
            f"{[u for u in missing if u in step.unsent]}"
        )
    return "WM-004", (
        f"the summary covers turns {got}; each evicted turn must reach exactly one successful "
        f"call, in order: {want}"
    )


def _pending_difference(model: SpecModel, inner: dict[str, Any], step: _Step) -> tuple[str, str]:
    spec = model.view()["conversation_memory"]
    got, want = _users(inner.get("pending_turns")), _users(spec.get("pending_turns"))
    by_user: dict[str, ModelTurn] = {t.rendered["user"]: t for t in model.turns}
    if got == want:
        return "STR-004", "pending turns are rendered differently from the spec"
    if sorted(got) == sorted(want):
        return "WM-005", f"pending turns out of order: {got}, the spec: {want}"
    for user in got:
        if user in want:
            continue
        entry = by_user.get(user)
        if entry is None:
            return "STR-004", f"a pending turn the memory was never given: {user!r}"
        rule = {
            "summarized": "WM-003",
            "recent": "WM-005",
            "backlog": "HLT-004",
            "dropped": "HLT-005" if model.rolling else "STR-002",
        }.get(entry.place, "BUD-010")
        return rule, f"{user!r} is shown as pending; the spec holds it as {entry.place}"
    missing = [u for u in want if u not in got]
    newest = missing[-1]
    entry = by_user[newest]
    if newest in _users(inner.get("recent_turns")):
        return "BUD-003", f"{newest!r} is still recent; the window evicted it"
    if newest in step.unsent:
        return "WM-003", (
            f"{newest!r}, evicted while a summarizer call ran, was removed when that call's "
            "summary was installed"
        )
    if entry.was_hidden:
        return "WM-006", f"{newest!r} was hidden by the budget and is gone (deleted)"
    if entry.why == "HLT-006":
        return "HLT-006", (
            f"{newest!r}, evicted while a recovery attempt ran, is not pending since it succeeded"
        )
    # A shorter run of the newest, none included when the budget hides some: hidden too many.
    hides = len(model.visible_pending) < len(model.pending)
    # Pending before RETRY began and not shown in it; one evicted in RETRY and not pending
    # did not become pending at all (WM-002).
    unshown = model.health == "retry" and entry.evicted_in != "retry"
    if unshown and not hides:
        return "HLT-003", f"in RETRY the view must show every pending turn; {missing} are not shown"
    if (got or hides) and want[len(want) - len(got) :] == got:
        return "BUD-010", (
            f"visible pending {got}; the longest run of newest pending turns that fits is {want}"
        )
    if unshown:
        return "HLT-003", f"in RETRY the view must show the pending turns; {missing} are not shown"
    return "WM-002", f"evicted turn {newest!r} is not pending (lost before any summary)"


def _recent_difference(model: SpecModel, inner: dict[str, Any]) -> tuple[str, str]:
    spec = model.view()["conversation_memory"]
    got, want = _users(inner.get("recent_turns")), _users(spec.get("recent_turns"))
    by_user = {t.rendered["user"]: t for t in model.turns}
    if got == want:
        return "STR-004", "recent turns are rendered differently from the spec"
    if sorted(got) == sorted(want):
        return "WM-005", f"recent turns out of order: {got}, the spec: {want}"
    extra = [u for u in got if u not in want]
    if extra and extra[0] in by_user:
        return by_user[extra[0]].evicted_by or "BUD-003", (
            f"{extra[0]!r} is still recent; the spec evicted it"
        )
    missing = [u for u in want if u not in got]
    return "BUD-004", f"{missing[0]!r} was evicted from recent although the view fits"


def _chain_end(changes: list[tuple[str, str]]) -> str:
    """The health the recorded ``(old, new)`` health callbacks end in."""
    return changes[-1][1] if changes else "healthy"
