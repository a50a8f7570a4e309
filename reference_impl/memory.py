"""``DefaultShortTermMemory``: the reference backend.

This module only orchestrates. Where turns go is :mod:`.watermark`, what fits is
:mod:`.budget`, when the summarizer may run is :mod:`.health`, the persisted form is
:mod:`.schema`. Every mutation of state is synchronous, so concurrent ``add_turn`` calls on
one event loop cannot interleave inside one (CON-001) and no lock is needed; the only
awaits are the summarizer call and sleeps, both in the memory's own worker task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from types import TracebackType
from typing import Any

from . import schema, watermark
from .budget import Budget
from .callbacks import CallbackQueue
from .entries import Entry, MemoryState, render_view
from .health import HealthMachine, Transition
from .inputs import MAX_REVISION, check_turn, text_problem
from .saves import Saves
from .types import (
    ConversationTurn,
    MemoryBudgetExceeded,
    MemoryHealth,
    MemoryKey,
    ShortTermMemoryConfig,
)

__all__ = [
    "DefaultShortTermMemory",
    "call_summarizer",
    "saved_for",
    "unless_replaced",
    "worker_crash",
]

logger = logging.getLogger("reference_impl.memory")

SummarizerFn = Callable[[Mapping[str, Any]], Awaitable[Mapping[str, Any]]]


class DefaultShortTermMemory:
    """In-memory short-term memory with background rolling summarization."""

    def __init__(
        self,
        *,
        config: ShortTermMemoryConfig,
        summarizer: SummarizerFn | None = None,
        time_source: Callable[[], float] | None = None,
        key: MemoryKey | None = None,
    ) -> None:
        """Create a memory.

        Args:
            config: strategy, budgets, retry settings and callbacks.
            summarizer: ``async (payload) -> {"summary": str}``; required for
                ``strategy="rolling_summary"``.
            time_source: monotonic clock used for retry and recovery timing.
            key: the key this memory belongs to; recorded in ``to_dict()`` and checked on
                load (KEY-007).
        """
        if not isinstance(config, ShortTermMemoryConfig):
            raise TypeError("config must be a ShortTermMemoryConfig")
        if config.strategy == "rolling_summary" and summarizer is None:
            raise ValueError("rolling_summary requires a summarizer callable")
        if summarizer is not None and not callable(summarizer):
            raise TypeError(f"summarizer must be callable, not {type(summarizer).__name__}")
        if key is not None and not isinstance(key, MemoryKey):
            raise TypeError("key must be a MemoryKey")
        self._config = config
        self._summarizer = None if summarizer is None else self._unless_replaced(summarizer)
        self._now = time_source or time.monotonic
        self._budget = Budget.for_config(config)
        self._size_of = self._budget.meter.size_of
        self._state = MemoryState(
            health=HealthMachine(
                config.retry_attempts, config.retry_backoff_base_s, config.degraded_retry_interval_s
            ),
            key=key,
            metered=not self._budget.defers_measuring,
        )
        self._worker: asyncio.Task[None] | None = None
        #: What ended the last worker when it should not have (a bug): ``flush`` raises it
        #: rather than wait for work that nobody does.
        self._crash: BaseException | None = None
        self._changes = 0
        #: The turns of the last persist, shared with the next one (schema.dump_reusing).
        self._records: schema.Records = {}
        self._changed = asyncio.Event()
        self._closed = False
        self._closing: asyncio.Task[None] | None = None
        self._saves = Saves()
        #: Summarizer calls given up on that have not ended yet (``aclose`` waits for them).
        self._abandoned: set[asyncio.Task[Any]] = set()
        self._on_turn = CallbackQueue("on_turn_added", config.on_turn_added)
        self._on_summary = CallbackQueue("on_summary_updated", config.on_summary_updated)
        self._on_health = CallbackQueue("on_health_changed", config.on_health_changed)

    # -- protocol ------------------------------------------------------------------------

    @property
    def health(self) -> MemoryHealth:
        """The summarizer's health (HLT-001)."""
        return self._state.health.state

    @property
    def key(self) -> MemoryKey | None:
        return self._state.key

    @property
    def changes(self) -> int:
        """How many times the state has changed (a turn added, a summarizer outcome
        recorded, a state loaded); the same count means the same state. Persisting does not
        count. A router saves a memory again only when this moved."""
        return self._changes

    @property
    def config(self) -> ShortTermMemoryConfig:
        return self._config

    async def add_turn(self, turn: ConversationTurn) -> None:
        """Record a finished turn. Never waits for the summarizer (WM-001).

        The memory keeps ``turn`` itself, as PenguiFlow's does: a copy would cost every
        turn. Treat it as the memory's from then on; changed afterwards, it would change
        what ``to_dict()`` writes but not the view, which is rendered here.

        Raises:
            MemoryBudgetExceeded: ``overflow_policy="error"`` and the turn does not fit;
                the memory is unchanged (BUD-006).
            TypeError: ``turn`` is malformed; the memory is unchanged.
            RuntimeError: the memory was closed.

        What the configured ``token_estimator`` raises measuring the view passes on; the
        turn is then stored (its callback runs) and the budget enforced at the next turn.
        """
        if self._closed:
            raise RuntimeError("add_turn on a closed memory")
        check_turn(turn)
        config = self._config
        strategy = config.strategy
        if strategy == "none":
            return
        state = self._state
        entry = Entry.make(
            state.next_seq,
            turn,
            include_digest=config.include_trajectory_digest,
            size_of=self._size_of if state.metered else None,
        )
        budget = config.budget
        if budget.overflow_policy == "error" and not self._budget.fits_after_add(state, entry):
            raise MemoryBudgetExceeded(
                f"turn would take the memory over total_max_tokens={budget.total_max_tokens}"
            )
        watermark.admit(state, entry, config)
        try:
            self._budget.enforce(state)
        finally:
            # Stored even when the estimator failed on the view: reported as stored.
            self._changes += 1
            self._on_turn.emit(turn)
            if strategy == "rolling_summary":
                self._wake()

    async def get_llm_context(self) -> Mapping[str, Any]:
        """The patch to merge into ``llm_context``: ``{"conversation_memory": {...}}``."""
        return self._view()

    def estimate_tokens(self) -> int:
        """``estimator(canonical_json(get_llm_context()))``, in O(1) for the default estimator."""
        return self._budget.tokens(self._state)

    async def flush(self) -> None:
        """Wait until every turn pending now is summarized, or memory is degraded (WM-007);
        after a ``from_dict`` meanwhile, every turn the loaded state holds pending then.

        Raises:
            RuntimeError: the summarizer worker crashed (a bug; it is logged), rather than
                wait for work nobody does. The next call starts a new worker.
        """
        if self._config.strategy != "rolling_summary" or self._closed:
            return
        state = self._state
        if not state.pending:
            return
        target = state.pending[-1].seq
        self._wake()
        while not self._closed:
            if self._state is not state:
                # A from_dict replaced the state: wait for what the loaded one holds pending.
                state = self._state
                if not state.pending:
                    return
                target = state.pending[-1].seq
            if state.summarized_through >= target or state.health.degraded:
                return
            if self._crash is not None:
                raise RuntimeError("the summarizer worker crashed") from self._crash
            await self._changed.wait()

    # -- lifecycle -----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Cancel background work (CON-003), after waiting for the saves of a ``persist``
        whose caller was cancelled. Idempotent: a second call, made while the first runs
        or after its caller stopped waiting, waits for the same closing to end."""
        closing = self._closing
        if closing is None:
            self._closed = True
            closing = self._closing = asyncio.get_running_loop().create_task(
                self._close(asyncio.current_task()), name="stm-close"
            )
        # In a task of its own: a caller that stops waiting (cancelled, or a task the
        # closing itself ends: a callback's, a save's) does not stop it half-way.
        await asyncio.shield(closing)

    async def _close(self, closer: asyncio.Task[Any] | None) -> None:
        await self._saves.wait(exclude=closer)  # not a save that closes its own memory
        worker, self._worker = self._worker, None
        if worker is not None and not worker.done():
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
        await wait_abandoned(self._abandoned)
        for queue in (self._on_turn, self._on_summary, self._on_health):
            await queue.aclose(closer=closer)  # a callback closing the memory returns
        self._notify()

    async def __aenter__(self) -> DefaultShortTermMemory:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- serialization and persistence ----------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The state as JSON-ready data, schema ``MemoryStateV2`` (SER-001)."""
        return schema.dump(self._state, self._config)

    def from_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the state; ``ValueError`` on malformed input, leaving it untouched (SER-003).

        Loads version 2 and PenguiFlow's version 1 (SER-004). Retry and recovery timers
        restart from now: monotonic times do not cross processes. Synchronous, as the
        protocol has it, so a large state holds the event loop while it loads (about
        3 ms per thousand turns, docs/performance.md); :meth:`afrom_dict` does not.
        """
        self._install(schema.load(state, self._config, self._budget, self._state.key))

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        """:meth:`from_dict`, letting other tasks run between steps of at most
        ``schema.STEP_TURNS`` turns, so that loading a large state never holds the event
        loop for long. Same errors, same result: the state is replaced when the load is
        complete, as by a ``from_dict`` at that moment. ``hydrate`` loads this way."""
        steps = schema.load_steps(state, self._config, self._budget, self._state.key)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                loaded: MemoryState = done.value
                break
            await asyncio.sleep(0)
        self._install(loaded)

    def _install(self, loaded: MemoryState) -> None:
        loaded.health.restart_timers(self._now())
        self._state = loaded
        self._notify()
        if self._config.strategy == "rolling_summary":
            self._wake()

    async def persist(self, store: Any, key: str) -> None:
        """Save through ``store.save_memory_state`` (SER-005) with the next revision (SER-006).

        A store with ``save_memory_state_if`` gets a conditional write expecting the
        revision this memory last hydrated or saved; a stale write raises the store's error
        and leaves the revision unchanged. Persists of one memory that overlap write one
        after another, in call order, each expecting the revision the one before it wrote:
        a memory does not conflict with itself. A state given to ``from_dict`` comes from no
        store, so the next persist expects no record: to go on from a stored record, use
        ``hydrate``. The state is ``to_dict()``'s, except that a turn
        the last persist gave the store is given as the same dict: a store reads the state,
        never changes it.
        """
        save = self._persisting(store, key)
        if save is not None:
            # A store may finish a write after its caller was cancelled (SQLite commits in
            # a thread): run to its end, the save keeps the revision in step with it.
            await self._saves.run(save)

    def _persisting(self, store: Any, key: str) -> Coroutine[Any, Any, None] | None:
        """:meth:`persist` without its shield: the state is taken now, and the returned
        coroutine saves it and advances the revision (``None``: ``store`` cannot save).

        For a caller that runs it to the end whatever happens to its own caller, such as
        a task of its own that nobody cancels; cancelled halfway, the revision may fall
        behind a write that landed.
        """
        if not hasattr(store, "save_memory_state"):
            return None
        memory_state = self._state
        state, self._records = schema.dump_reusing(memory_state, self._config, self._records)
        state["storage_key"] = key
        conditional = getattr(store, "save_memory_state_if", None)

        async def save() -> None:
            # One save at a time, in call order, the revision read when its turn comes: a
            # persist made while the last one is still writing expects what that one
            # wrote, not the revision they both started from (a conflict with itself).
            async with self._saves.in_order:
                current = memory_state.revision
                if current >= MAX_REVISION:  # stores keep revisions in a signed 64-bit integer
                    raise ValueError(f"revision {current} cannot advance: at most {MAX_REVISION}")
                state["revision"] = current + 1
                if conditional is not None:
                    expected = current if memory_state.stored else None
                    await conditional(key, state, expected_revision=expected)
                else:
                    await store.save_memory_state(key, state)
                memory_state.revision = current + 1
                memory_state.stored = True

        return save()

    async def hydrate(self, store: Any, key: str) -> None:
        """Load through ``store.load_memory_state``; refuse another key's state (KEY-007)."""
        if not hasattr(store, "load_memory_state"):
            return
        data = await store.load_memory_state(key)
        if not saved_for(data, key):
            return
        try:
            await self.afrom_dict(data)
        except schema.KeyMismatchError as exc:
            logger.warning("refusing to hydrate %r: %s", key, exc)
            return
        self._state.stored = True

    def get_artifact(self, ref: str) -> Any | None:
        """Hidden artifacts are not stored by this backend."""
        del ref
        return None

    @property
    def dropped_turns(self) -> int:
        """Turns dropped from a full DEGRADED backlog (HLT-005)."""
        return self._state.dropped_turns

    # -- internals -----------------------------------------------------------------------

    def _view(self) -> dict[str, Any]:
        return render_view(self._config.strategy, self._state)

    def _notify(self) -> None:
        self._changes += 1
        self._changed.set()
        self._changed = asyncio.Event()

    def _transition(self, change: Transition) -> None:
        old, new = change
        if old is not new:
            logger.info("summarizer health %s -> %s", old.value, new.value)
            self._on_health.emit(old, new)

    def _wake(self) -> None:
        if self._closed or (self._worker is not None and not self._worker.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (e.g. from_dict at import time): the next async call starts it
        self._crash = None
        self._worker = loop.create_task(self._work(), name="stm-summarizer")
        self._worker.add_done_callback(self._worker_ended)

    def _worker_ended(self, task: asyncio.Task[None]) -> None:
        if (crash := worker_crash(task, self._worker, logger)) is not None:
            self._crash = crash
            self._notify()  # flush() waiters see it

    async def _work(self) -> None:
        """The only place the summarizer is called: one call at a time (WM-004)."""
        while not self._closed:
            state = self._state
            batch = watermark.take_batch(state)
            if batch is None:
                return
            delay = state.health.wait_s(self._now())
            if delay > 0:
                await self._sleep(delay)
                continue  # re-read: the state may have been replaced meanwhile
            if state.health.state is MemoryHealth.DEGRADED:
                self._transition(state.health.begin_recovery(self._now()))
            summary, error = await self._call(batch)
            if self._state is not state:
                continue  # from_dict replaced the state during the call
            if error is None:
                assert summary is not None
                error = self._reject_summary(state, batch, summary)
            if error is None:
                assert summary is not None
                old = state.summary
                watermark.install(state, batch, summary)
                self._transition(state.health.on_success())
                self._on_summary.emit(old, summary)
            else:
                logger.warning("summarizer call failed: %s", error)
                change = state.health.on_failure(self._now())
                if change[1] is MemoryHealth.DEGRADED and change[0] is not MemoryHealth.RECOVERING:
                    watermark.degrade(state, self._config)
                self._transition(change)
            try:
                self._budget.settle(state)
            except Exception:  # the estimator, on the view: trimmed at the next turn
                logger.exception("token_estimator raised bringing the view within budget")
            self._notify()
            # Yield even when nothing above did: a summarizer that fails before its first
            # await, with no wait before the next attempt, must not hold the loop.
            await asyncio.sleep(0)

    async def _sleep(self, delay: float) -> None:
        """Wait ``delay`` seconds, or less if ``from_dict`` replaces the state meanwhile:
        a loaded state must not wait out the retry or recovery timer of the old one."""
        changed = self._changed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await changed.wait()

    def _unless_replaced(self, summarizer: SummarizerFn) -> SummarizerFn:
        """``summarizer``, for calls that fail unstarted once ``from_dict`` replaced the
        state their batch came from (:func:`unless_replaced`)."""
        return unless_replaced(summarizer, lambda: self._state)

    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        """Run one summarizer call; returns ``(summary, None)`` or ``(None, reason)``."""
        assert self._summarizer is not None
        return await call_summarizer(
            self._summarizer, batch, self._config.summarizer_timeout_s, self._abandoned
        )

    def _reject_summary(
        self, state: MemoryState, batch: watermark.Batch, summary: str
    ) -> str | None:
        """Why ``summary`` is a failed call by the budget (BUD-007), or ``None``."""
        return self._budget.refuse_summary(state, batch, summary)


def worker_crash(
    task: asyncio.Task[None], current: asyncio.Task[None] | None, log: logging.Logger
) -> BaseException | None:
    """What a summarizer worker that ended raised, logged, for ``flush()`` to raise on: not
    when it ended normally or was cancelled, nor once a worker started after it ended
    (before this done callback ran) is ``current``, the one ``flush()`` waits for."""
    if task.cancelled() or (exc := task.exception()) is None:
        return None
    log.error("summarizer worker crashed", exc_info=exc)
    return exc if task is current else None


def unless_replaced(summarizer: SummarizerFn, current: Callable[[], object]) -> SummarizerFn:
    """``summarizer``, for a memory whose state ``current()`` names: an object that stays
    the same (``is``) while nothing replaces the state, such as the state itself or a
    count of replacements.

    The worker takes a batch and invokes this at once, which notes ``current()``, but the
    call runs as a task of its own (:func:`call_summarizer`), which starts on a later turn
    of the loop: a ``from_dict`` may come in between. Called then, the summarizer would get
    turns the loaded state sends again, and two calls would succeed for them (WM-004). The
    call fails instead, and the worker drops it with the replaced state.
    """

    def summarize(payload: Mapping[str, Any]) -> Coroutine[Any, Any, Mapping[str, Any]]:
        taken_from = current()

        async def call() -> Mapping[str, Any]:
            if current() is not taken_from:
                raise RuntimeError("the state was replaced before the call started")
            return await summarizer(payload)

        return call()

    return summarize


async def call_summarizer(
    summarizer: SummarizerFn,
    batch: watermark.Batch,
    timeout_s: float | None,
    abandoned: set[asyncio.Task[Any]] | None = None,
) -> tuple[str | None, str | None]:
    """One summarizer call for ``batch``: ``(summary, None)``, or ``(None, reason)`` for any
    failure (HLT-007): an exception, a timeout (WM-008), output without a string summary.
    Cancellation of the calling task itself propagates. A call given up on (timed out, or
    its caller cancelled) is cancelled and kept in ``abandoned`` until it ends."""
    payload = {
        "previous_summary": batch.previous_summary,
        "turns": [e.fresh() for e in batch.entries],
    }
    # A task of its own: a call that ignores its cancellation is abandoned at the timeout
    # (or when the caller is cancelled) instead of holding the caller forever (WM-008).
    try:
        call = asyncio.ensure_future(summarizer(payload))
    except _PROCESS_EXITS:
        raise
    except BaseException as exc:  # raised at once, or returned something not awaitable
        return None, f"summarizer raised {type(exc).__name__}: {exc}"
    try:
        done, _ = await asyncio.wait({call}, timeout=timeout_s)
    except asyncio.CancelledError:
        _abandon(call, abandoned)
        raise
    if not done:
        _abandon(call, abandoned)
        return None, f"summarizer timed out after {timeout_s}s"
    try:
        response = call.result()
        summary = response.get("summary") if isinstance(response, Mapping) else None
    except _PROCESS_EXITS:
        raise
    except BaseException as exc:  # CancelledError and any other: a failed call (HLT-007)
        return None, f"summarizer raised {type(exc).__name__}: {exc}"
    if not isinstance(response, Mapping):
        return None, f"summarizer returned {type(response).__name__}, not a mapping"
    if not isinstance(summary, str):
        return None, "summarizer output has no string 'summary'"
    problem = text_problem(summary)
    if problem is not None:  # it could never be stored or sent on
        return None, f"summarizer output 'summary': {problem}"
    return summary, None


#: What a summarizer may raise that is not its failure but the process ending: passed on.
_PROCESS_EXITS = (KeyboardInterrupt, SystemExit)

#: How long an abandoned summarizer call may take to honour its cancellation before its
#: coroutine is closed (else the event loop's shutdown would wait for it forever).
ABANDON_GRACE_S = 1.0


def _abandon(call: asyncio.Future[Any], abandoned: set[asyncio.Task[Any]] | None) -> None:
    """Cancel a summarizer call and stop waiting for it; whatever it does later is ignored.
    Its task stays in ``abandoned`` until it ends (at most ``ABANDON_GRACE_S`` from now)."""
    call.cancel()
    call.add_done_callback(_ignore_outcome)
    if isinstance(call, asyncio.Task):
        call.get_loop().call_later(ABANDON_GRACE_S, _close_if_running, call)
        if abandoned is not None and not call.done():
            abandoned.add(call)
            call.add_done_callback(abandoned.discard)


async def wait_abandoned(abandoned: set[asyncio.Task[Any]]) -> None:
    """Wait for abandoned summarizer calls to end: a call that honours its cancellation
    ends when its own cleanup does, one that ignores it is closed ``ABANDON_GRACE_S`` after
    it was abandoned (CON-003: no call of a closed memory runs on)."""
    if abandoned:
        await asyncio.wait(set(abandoned), timeout=ABANDON_GRACE_S + 0.05)


def _close_if_running(call: asyncio.Task[Any]) -> None:
    """Close the coroutine of a call that ignored its cancellation: ``GeneratorExit``
    where it waits, and the task ends at its next step."""
    if not call.done():
        with contextlib.suppress(RuntimeError, ValueError):  # it caught GeneratorExit too
            call.get_coro().close()
        call.cancel()


def _ignore_outcome(call: asyncio.Future[Any]) -> None:
    if not call.cancelled():
        call.exception()  # retrieved: an abandoned call's failure is never logged as lost


def saved_for(data: Any, key: str) -> bool:
    """Whether a loaded record may be hydrated under ``key``: present, and not saved under
    another storage key (KEY-007; a refusal is logged, never raised)."""
    if data is None:
        return False
    stored_key = data.get("storage_key") if isinstance(data, Mapping) else None
    if stored_key is not None and stored_key != key:
        logger.warning("refusing to hydrate %r with state saved for %r", key, stored_key)
        return False
    return True
