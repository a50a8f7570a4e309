"""``RedisShortTermMemory``: a short-term memory whose whole state lives in Redis.

Any number of instances, in any number of processes, on one :class:`MemoryKey` and
namespace see one memory. The rules are the reference's own (:mod:`reference_impl.watermark`,
:mod:`reference_impl.budget`, :mod:`reference_impl.health`, :mod:`reference_impl.schema`),
applied client-side to the state loaded from Redis; every change is written back by one
compare-and-set script that also checks the turn id (idempotent retries), the fencing
token of the summarizer lease and the session epoch. See ``docs/redis.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import os
import random
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from redis import Redis as SyncRedis
from redis import exceptions as redis_errors
from redis.asyncio import Redis

from reference_impl import (
    ConversationTurn,
    MemoryBudgetExceeded,
    MemoryHealth,
    MemoryKey,
    ShortTermMemoryConfig,
    schema,
    watermark,
)
from reference_impl.budget import Budget
from reference_impl.callbacks import CallbackQueue
from reference_impl.entries import Entry, MemoryState, render_view
from reference_impl.health import HealthMachine, Transition
from reference_impl.inputs import check_turn, check_turn_id
from reference_impl.memory import (
    call_summarizer,
    saved_for,
    unless_replaced,
    wait_abandoned,
    worker_crash,
)
from reference_impl.saves import Saves

from . import scripts, state_json
from .errors import RedisContentionError, RedisMemoryError, RedisUnavailableError
from .keys import DEFAULT_NAMESPACE, SessionKeys
from .options import check_count, check_ms, check_seconds

__all__ = ["CLOSE_GRACE_S", "DEFAULT_LEASE_TTL_S", "DEFAULT_TTL_S", "RedisShortTermMemory"]

logger = logging.getLogger("stm_redis.memory")

#: Sliding expiry of a session's keys, refreshed by every write: one day.
DEFAULT_TTL_S = 24 * 3600.0
#: How long a summarizer lease lives without renewal (the holder renews it every third).
DEFAULT_LEASE_TTL_S = 5.0

SummarizerFn = Callable[[Mapping[str, Any]], Awaitable[Mapping[str, Any]]]
_T = TypeVar("_T")
#: A summarizer outcome not yet written: its number (in this instance) and the change.
_Outcome = tuple[int, Callable[[MemoryState], Any]]

_READ = scripts.Lua.of(scripts.READ)
_COMMIT = scripts.Lua.of(scripts.COMMIT)
_ACQUIRE = scripts.Lua.of(scripts.ACQUIRE)
_RENEW = scripts.Lua.of(scripts.RENEW)
_RELEASE = scripts.Lua.of(scripts.RELEASE)
_RELEASE_OWNED = scripts.Lua.of(scripts.RELEASE_OWNED)
_CLEAR = scripts.Lua.of(scripts.CLEAR)

#: How many times a summarizer outcome is sent while Redis does not answer.
_OUTCOME_ATTEMPTS = 3
#: How many turns whose write's reply was lost an instance remembers for their retry.
_LOST_WRITES_KEPT = 1024
#: How long ``aclose()`` waits, in all, for what needs Redis's answer (the calls under way,
#: a save, the worker releasing its lease) before it closes the client under them anyway:
#: a server that stopped answering must not keep a memory from closing.
CLOSE_GRACE_S = 5.0

_UNAVAILABLE = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError, TimeoutError)


class _Stale(Exception):
    """The state changed under a summarizer call so that its outcome no longer applies."""


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """The state as of revision ``rev`` (``"-1"``: a local state not yet written)."""

    rev: str
    fence: int
    epoch: int
    state: MemoryState
    #: The last summarizer outcome written into this state, ``"<owner>#<n>"`` (``""``:
    #: none yet). Carried by every write, so a snapshot read before the reply of an
    #: outcome's write shows whether it holds that outcome already (:meth:`_state`).
    outcome: str = ""
    #: The server's clock (microseconds) when it read this state; 0: not known.
    read_at: int = 0


def _counter(value: Any) -> int:
    """A counter of the state hash, as the scripts accept one (``ValueError`` otherwise):
    ``int()`` alone would also read ``"007"`` and ``" 7"``, which ``HINCRBY`` refuses."""
    text = _text(value)
    if not _COUNTER.fullmatch(text):
        raise ValueError(f"counter {text!r} is not an integer of at most 18 digits")
    return int(text)


_COUNTER = re.compile(r"0|-?[1-9][0-9]{0,17}")


def _fields(reply: Any) -> Any:
    """A reply as a list of fields: one string of space-separated fields, or an array."""
    if isinstance(reply, bytes | str):
        return _text(reply).split(" ")
    return reply


def _json_float(value: float) -> str:
    # ``repr`` of a finite float is its JSON text; ``json.dumps`` is for the rest.
    return repr(value) if math.isfinite(value) else json.dumps(value)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


class RedisShortTermMemory:
    """Short-term memory shared through Redis by every instance on one key and namespace.

    ``health``, ``estimate_tokens()`` and ``to_dict()`` are synchronous, as in the
    protocol: they describe the state this instance last read or wrote (every
    ``add_turn``, ``get_llm_context``, ``flush`` and summarizer step refreshes it).
    """

    def __init__(
        self,
        client: Redis,
        *,
        config: ShortTermMemoryConfig,
        key: MemoryKey,
        summarizer: SummarizerFn | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        ttl_s: float | None = DEFAULT_TTL_S,
        lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
        poll_interval_s: float = 0.05,
        owns_client: bool = False,
        sync_client: SyncRedis | None = None,
        max_attempts: int = 64,
        turn_ids_kept: int = 10_000,
    ) -> None:
        """Create an instance; nothing is read or written until the first call.

        Args:
            client: a ``redis.asyncio.Redis`` (any client of that class, e.g. fakeredis').
            config: strategy, budgets, retry settings and callbacks, as for the reference.
            key: the memory's key; with ``namespace`` it names the Redis keys.
            summarizer: ``async (payload) -> {"summary": str}``; required for
                ``rolling_summary``.
            namespace: prefix of every Redis key (no braces).
            ttl_s: sliding expiry of the session's keys, set by every write; ``None``
                keeps them until :meth:`clear`.
            lease_ttl_s: lifetime of the summarizer lease between renewals; a crashed
                holder's lease is taken over after at most this long.
            poll_interval_s: how often ``flush()`` and a waiting worker re-read the state
                while another instance holds the lease.
            owns_client: close ``client`` (and ``sync_client``) in :meth:`aclose`.
            sync_client: a synchronous client of the same server; with it, ``from_dict``
                writes the new state before it returns (one blocking round trip), else
                in the background.
            max_attempts: compare-and-set attempts before :class:`RedisContentionError`.
            turn_ids_kept: how many of the newest turn ids are remembered for retries.
        """
        if not isinstance(config, ShortTermMemoryConfig):
            raise TypeError("config must be a ShortTermMemoryConfig")
        if not isinstance(key, MemoryKey):
            raise TypeError("key must be a MemoryKey")
        if config.strategy == "rolling_summary" and summarizer is None:
            raise ValueError("rolling_summary requires a summarizer callable")
        if summarizer is not None and not callable(summarizer):
            raise TypeError(f"summarizer must be callable, not {type(summarizer).__name__}")
        if ttl_s is not None:
            check_ms("ttl_s", ttl_s)
        check_ms("lease_ttl_s", lease_ttl_s)
        check_seconds("poll_interval_s", poll_interval_s)
        check_count("max_attempts", max_attempts)
        check_count("turn_ids_kept", turn_ids_kept)
        self._client = client
        self._config = config
        self._key = key
        # A call this instance began before its own from_dict reaches no summarizer after
        # it (WM-004); the count is a new int after each replacement.
        self._summarizer = (
            None if summarizer is None else unless_replaced(summarizer, lambda: self._replacements)
        )
        self._keys = SessionKeys.for_key(namespace, key)
        self._budget = Budget.for_config(config)
        self._config_text = state_json.config_json(config)
        self._ttl_ms = str(round(ttl_s * 1000)) if ttl_s is not None else "0"
        self._lease_ms = str(max(1, round(lease_ttl_s * 1000)))
        self._lease_s = lease_ttl_s
        self._poll_s = poll_interval_s
        self._owns_client = owns_client
        self._max_attempts = max_attempts
        self._ids_kept = str(turn_ids_kept)
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        # Keys go as bytes: the client sends bytes as they are, without encoding them.
        self._key_bytes = tuple(k.encode() for k in self._keys.all())
        self._sync_client = sync_client
        self._sync_commit = (
            None if sync_client is None else sync_client.register_script(scripts.COMMIT)
        )
        self._snap: _Snapshot | None = None
        #: The JSON text of each stored turn, by ``id(entry)`` (see :meth:`_turn_text`).
        self._turn_texts: dict[int, tuple[Entry, str]] = {}
        #: Summarizer outcomes being written, numbered in the order they happened: the
        #: synchronous accessors show them applied to the newest state meanwhile (cached
        #: per revision), as the reference shows an installed summary at once, except
        #: those that state holds already. Never the base of a write.
        self._outcomes: list[_Outcome] = []
        self._outcome_count = 0
        #: The fence and epoch of the lease the outcomes were made under: a state with
        #: others (the lease taken over, a ``clear()`` or ``from_dict`` elsewhere) will
        #: refuse them, so they are not shown on it.
        self._outcomes_for = (0, 0)
        #: How many times ``from_dict`` replaced the state: a call in flight across a
        #: replacement belongs to the replaced state, and its outcome is dropped (WM-004).
        self._replacements = 0
        self._shown: tuple[str, tuple[int, ...], MemoryState] | None = None
        self._pending_doc: str | None = None
        #: The id of the replacement in ``_pending_doc``: a retry after a lost reply finds
        #: it written already, and does not overwrite what came after it.
        self._pending_rid = ""
        #: A revision a store holds but whose write to Redis failed after the store's save
        #: (``persist``), with the epoch it belongs to: written before the next persist,
        #: which would otherwise expect the old revision and be refused as stale forever.
        self._unmarked: tuple[int, int] | None = None
        #: The write id of each turn whose write's reply was lost (oldest first), for the
        #: retry ``add_turn(turn, turn_id=error.turn_id)`` to send again.
        self._lost_writes: dict[str, str] = {}
        self._replace_lock = asyncio.Lock()
        #: Writes of one instance queue here rather than race each other's compare-and-set.
        self._write_lock = asyncio.Lock()
        self._replace_task: asyncio.Task[None] | None = None
        self._worker: asyncio.Task[None] | None = None
        #: What ended the last worker, if it crashed (a bug): ``flush()`` raises it rather
        #: than wait for work nobody does.
        self._crash: BaseException | None = None
        #: A lease taken by ``add_turn``'s own script, for the worker to use at once.
        #: With its token and when it was asked for (``time.monotonic()``): the lease is
        #: sure to be held until ``lease_ttl_s`` after that.
        self._handoff: tuple[_Snapshot, str, float] | None = None
        self._changed = asyncio.Event()
        self._closed = False
        #: Calls of the protocol under way (:meth:`_counted`): ``aclose()`` waits for them
        #: before closing the client, so that none loses its connection halfway.
        self._calls = 0
        self._calls_ended = asyncio.Event()
        self._closing: asyncio.Task[None] | None = None
        #: Set once ``aclose()`` is past the last command it sends: no command goes out.
        self._client_closed = False
        self._saves = Saves()
        #: Summarizer calls given up on that have not ended yet (``aclose`` waits for them).
        self._abandoned: set[asyncio.Task[Any]] = set()
        self._on_turn = CallbackQueue("on_turn_added", config.on_turn_added)
        self._on_summary = CallbackQueue("on_summary_updated", config.on_summary_updated)
        self._on_health = CallbackQueue("on_health_changed", config.on_health_changed)
        #: Scripts this instance ran (one round trip each, unless a script had to be
        #: reloaded after ``SCRIPT FLUSH`` or a restart).
        self.round_trips = 0

    # -- protocol ------------------------------------------------------------------------

    @property
    def health(self) -> MemoryHealth:
        """The summarizer's health as of the last state read or written (HLT-001)."""
        return self._state().health.state

    @property
    def key(self) -> MemoryKey:
        return self._key

    @property
    def config(self) -> ShortTermMemoryConfig:
        return self._config

    @property
    def redis_key(self) -> str:
        """The Redis key of this session's state hash (errors name it)."""
        return self._keys.state

    async def add_turn(self, turn: ConversationTurn, *, turn_id: str | None = None) -> None:
        """Record a finished turn in one round trip; never waits for the summarizer.

        ``turn_id`` identifies the turn (default: the turn's own ``turn_id``, else a fresh
        UUID): a turn whose id is recorded already is not added again, so a caller that
        lost the reply may retry. A ``turn_id`` given here is stored as the turn's own, so
        that it outlives a replacement (``from_dict``, ``hydrate``) of a state holding the
        turn; a fresh UUID is not, and is known only until such a replacement.

        Raises:
            MemoryBudgetExceeded: ``overflow_policy="error"`` and the turn does not fit
                (a turn whose id is recorded already is not refused: it is stored).
            RedisUnavailableError: Redis did not answer; ``recorded`` says whether the
                turn is stored (``None``: unknown, retry with ``turn_id=error.turn_id``).
            RedisMemoryError: Redis refused the operation; nothing was written.
            TypeError: ``turn`` is malformed. RuntimeError: the memory was closed.
        """
        with self._counted("add_turn"):
            await self._add_turn(turn, turn_id)

    async def _add_turn(self, turn: ConversationTurn, turn_id: str | None) -> None:
        check_turn(turn)
        check_turn_id(turn_id, "turn_id")
        if self._config.strategy == "none":
            return
        tid = turn_id if turn_id is not None else turn.turn_id
        if tid is None:
            tid = os.urandom(16).hex()  # as random as uuid4
        # A replacement rebuilds the recorded ids from the stored turns' own.
        stored = turn if turn_id is None else dataclasses.replace(turn, turn_id=turn_id)
        config, budget = self._config, self._budget

        def admit(state: MemoryState) -> None:
            entry = Entry.make(
                state.next_seq,
                stored,
                include_digest=config.include_trajectory_digest,
                size_of=budget.meter.size_of,
            )
            if config.budget.overflow_policy == "error" and not budget.fits_after_add(state, entry):
                raise MemoryBudgetExceeded(
                    f"turn would take the memory over total_max_tokens="
                    f"{config.budget.total_max_tokens}"
                )
            watermark.admit(state, entry, config)
            budget.enforce(state)

        # A retry of a write whose reply was lost sends the same write id: found made, the
        # turn is reported as added (CB-001) and a lease it took is used.
        wid = self._lost_writes.pop(tid, None) or os.urandom(8).hex()
        try:
            status, _, written = await self._commit(
                admit, turn_id=tid, lease_if=self._wants_lease, wid=wid
            )
        except RedisMemoryError as exc:
            if exc.recorded is None:
                self._lost_writes[tid] = wid
                if len(self._lost_writes) > _LOST_WRITES_KEPT:
                    del self._lost_writes[next(iter(self._lost_writes))]
            raise
        if self._closed:
            # aclose() began while the write was in flight (it waits for this call): the
            # turn is stored, but no callback is delivered any more, and a lease the
            # write took is nobody's to use.
            await self._release_handoff()
            return
        if status == "ok":
            self._on_turn.emit(turn)
        if self._handoff is not None or (
            written is not None and watermark.take_batch(written.state) is not None
        ):
            self._wake()

    async def get_llm_context(self) -> Mapping[str, Any]:
        """The patch to merge into ``llm_context``, read in one round trip.

        Raises:
            RuntimeError: the memory was closed (its view may be stale: it reads Redis no
                more).
        """
        with self._counted("get_llm_context"):
            if self._config.strategy == "none":
                return {}
            snap = await self._refresh()
        if watermark.waiting(snap.state):
            # Work waits, maybe for a retry or recovery nobody else will make (the
            # instance whose call failed has gone): this one's worker sees to it
            # (HLT-002, HLT-006). A running worker makes this a no-op.
            self._wake()
        return render_view(self._config.strategy, self._state())

    def estimate_tokens(self) -> int:
        """``estimator(canonical_json(view))`` of the state last read or written (BUD-008)."""
        return self._budget.tokens(self._state())

    async def flush(self) -> None:
        """Wait until every turn pending now is summarized, or memory is degraded (WM-007);
        after a ``from_dict`` meanwhile, every turn the loaded state holds pending then.

        The summarizer may run in another instance: this one re-reads the state every
        ``poll_interval_s`` while it waits.

        Raises:
            RuntimeError: this instance's summarizer worker crashed (a bug; it is logged),
                rather than start it again and again. The next call starts a new worker.

        On a closed memory, or once ``aclose()`` begins, it returns: nothing waits for
        this instance's summarizer any more.
        """
        if self._config.strategy != "rolling_summary" or self._closed:
            return
        with self._counted("flush"):
            await self._flush()

    async def _flush(self) -> None:
        snap = await self._refresh()
        if not snap.state.pending:
            return
        target, epoch = snap.state.pending[-1].seq, snap.epoch
        self._wake()  # a worker that crashed before this call starts afresh
        while not self._closed:
            state = snap.state
            if snap.epoch != epoch:
                # A from_dict replaced the state: wait for what the loaded one holds pending.
                if not state.pending:
                    return
                target, epoch = state.pending[-1].seq, snap.epoch
            if state.summarized_through >= target or state.health.degraded:
                return
            if self._crash is not None:
                raise RuntimeError("the summarizer worker crashed") from self._crash
            self._wake()
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_s):
                    await changed.wait()
            if self._closed:  # aclose() wakes this wait and waits for this call to end
                return
            snap = await self._refresh()

    # -- lifecycle -----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop background work (CON-003), write a pending ``from_dict``, release the lease
        (when held) and close the client if this memory owns it. Idempotent: a second
        call, or one made after a caller gave up waiting, waits for the same closing.

        Calls under way end first, as they would have (an ``add_turn`` on the wire is
        stored and returns; a ``flush()`` returns at once); calls made from then on,
        except the synchronous accessors (``to_dict()``, ``estimate_tokens()``,
        ``health``), raise ``RuntimeError``: a closed memory reads and writes Redis no
        more. Whatever needs Redis's answer (the calls under way, a save, releasing the
        lease, writing a pending ``from_dict``) is waited for :data:`CLOSE_GRACE_S` in
        all; a server that has not answered by then does not keep the memory open.
        """
        closing = self._closing
        if closing is None:
            self._closed = True
            self._notify()  # a flush() waiting returns
            closing = self._closing = asyncio.get_running_loop().create_task(
                self._close(asyncio.current_task()), name="stm-redis-close"
            )
        # In a task of its own: a caller that stops waiting (cancelled, or a task the
        # closing itself ends, such as the summarizer's or a callback's) does not stop
        # the closing half-way; the next aclose() waits for it.
        await asyncio.shield(closing)

    async def _close(self, closer: asyncio.Task[Any] | None) -> None:
        deadline = asyncio.get_running_loop().time() + CLOSE_GRACE_S
        answered = True

        async def bounded(step: Callable[[], Awaitable[Any]], what: str) -> None:
            """``step()``, unless Redis has not answered within the grace already."""
            nonlocal answered
            if not answered:
                logger.warning("%s skipped: Redis did not answer while closing", what)
                return
            try:
                async with asyncio.timeout_at(deadline):
                    await step()
            except TimeoutError:
                answered = False
                logger.warning("%s: Redis did not answer within %ss", what, CLOSE_GRACE_S)
            except RedisMemoryError as exc:
                logger.warning("%s failed: %s", what, exc)

        if self._calls:
            await bounded(self._calls_ended.wait, "waiting for the calls under way")
        # A save of a persist whose caller was cancelled writes to Redis last: before the
        # client closes.
        await bounded(lambda: self._saves.wait(exclude=closer), "waiting for a save")
        tasks = [t for t in (self._worker, self._replace_task) if t is not None and not t.done()]
        self._worker = self._replace_task = None
        for task in tasks:
            task.cancel()
        # A cancelled worker releases its lease on the way out.
        await bounded(lambda: asyncio.gather(*tasks, return_exceptions=True), "stopping the worker")
        await wait_abandoned(self._abandoned)
        for queue in (self._on_turn, self._on_summary, self._on_health):
            await queue.aclose(closer=closer)  # a callback closing the memory returns
        await bounded(self._release_handoff, "releasing a lease taken for the worker")
        if tasks:
            # A worker cancelled while its ACQUIRE was on the way may hold the lease under
            # a fence it never read: released here, or every other instance's next call
            # would wait out lease_ttl_s.
            await bounded(
                lambda: self._script(_RELEASE_OWNED, [self._owner]), "releasing the lease"
            )
        if self._pending_doc is not None:
            await bounded(self._apply_replace, "writing the state loaded by from_dict")
        self._client_closed = True  # from here on no command is sent (a closed client
        if self._owns_client:  # would open a new connection for it)
            await self._client.aclose()
            if self._sync_client is not None:
                self._sync_client.close()
        if not answered:
            # What still waits on Redis fails now that the client is closed, or ends at
            # (another) cancellation: a client this memory does not own stays open, and a
            # store's save may wait on something else altogether.
            for task in tasks:
                task.cancel()
            self._saves.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._saves.wait(exclude=closer)
        self._notify()

    @contextlib.contextmanager
    def _counted(self, name: str) -> Iterator[None]:
        """A call of the protocol under way, counted for ``aclose()`` to wait for; refused
        on a closed memory."""
        if self._closed:
            raise RuntimeError(f"{name} on a closed memory")
        self._calls += 1
        try:
            yield
        finally:
            self._calls -= 1
            if not self._calls and self._closed:
                self._calls_ended.set()

    async def _release_handoff(self) -> None:
        """Release a lease a write took for a worker that will not use it."""
        handoff, self._handoff = self._handoff, None
        if handoff is not None:
            with contextlib.suppress(RedisMemoryError):
                await self._script(_RELEASE, [handoff[1]])

    async def __aenter__(self) -> RedisShortTermMemory:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def clear(self) -> None:
        """Forget this session in Redis (turns, summary, health, turn ids), in two round
        trips (the script, then a read). A state given to ``from_dict`` before it and not
        yet written is dropped; if the clear raises, it is kept, to be written.

        Raises:
            RuntimeError: the memory was closed.
        """
        with self._counted("clear"):
            await self._clear()

    async def _clear(self) -> None:
        pending, rid = self._pending_doc, self._pending_rid
        self._pending_doc = None  # the clear comes after a from_dict made before it
        try:
            await self._script(_CLEAR, [self._ttl_ms])
        except RedisMemoryError:
            if self._pending_doc is None:  # maybe not cleared: the caller may clear again
                self._pending_doc, self._pending_rid = pending, rid
            raise
        if self._pending_doc is None:  # a from_dict made meanwhile comes after the clear
            self._snap = None
        await self._refresh()
        self._notify()

    async def turn_recorded(self, turn_id: str) -> bool:
        """Whether a turn with this id was recorded (among the newest ``turn_ids_kept``).

        A state given to ``from_dict`` and not yet written is written first: its turn ids
        replace those of the history it replaced.

        Raises:
            RuntimeError: the memory was closed.
        """
        if turn_id is None:
            raise TypeError("turn_id must be a str")
        check_turn_id(turn_id, "turn_id")
        with self._counted("turn_recorded"):
            return await self._turn_recorded(turn_id)

    async def _turn_recorded(self, turn_id: str) -> bool:
        await self._apply_replace()
        if self._client_closed:
            raise RuntimeError("a closed memory sends no command to Redis")
        task, cancels = _cancels()
        try:
            score = await self._client.zscore(self._keys.ids, turn_id)
            _raise_if_cancelled_meanwhile(task, cancels)
        except _UNAVAILABLE as exc:
            raise RedisUnavailableError(
                f"Redis unavailable: {type(exc).__name__}: {exc}", key=self._keys.state
            ) from exc
        except redis_errors.RedisError as exc:  # e.g. the key holds another type
            raise RedisMemoryError(
                f"Redis refused the operation: {type(exc).__name__}: {exc}", key=self._keys.ids
            ) from exc
        return score is not None

    # -- serialization and persistence ----------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The state last read or written, schema ``MemoryStateV2`` (SER-001)."""
        return schema.dump(self._state(), self._config)

    def from_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the shared state; ``ValueError`` on malformed input (SER-003).

        With a ``sync_client`` the new state is written before this returns. Without
        one, this instance shows it at once and writes it in the background, before its
        next call reaches Redis (``aclose()`` writes it too).

        Raises:
            RuntimeError: the memory was closed (or is closing): the state would never be
                written.
        """
        if self._closed:
            raise RuntimeError("from_dict on a closed memory")
        self._replace(state, stored=False)

    async def persist(self, store: Any, key: str) -> None:
        """Save the current state through ``store`` with the next revision (SER-005/006);
        a store with ``save_memory_state_if`` gets a conditional write. Persists of one
        instance that overlap write one after another, in call order, each expecting the
        revision the one before it wrote.

        If Redis fails after the store saved, the error is raised, and the revision the
        store now holds is written to Redis first thing at the next ``persist``.

        Raises:
            RuntimeError: the memory was closed.
        """
        if not hasattr(store, "save_memory_state"):
            return
        if self._closed:
            raise RuntimeError("persist on a closed memory")
        # Not counted as a call under way: aclose() waits for the save itself (all but one
        # that closes the memory from inside the store).
        await self._saves.run(self._save_in_order(store, key))

    async def _save_in_order(self, store: Any, key: str) -> None:
        # One save of this instance at a time, in call order, the revision read when its
        # turn comes: a persist made while the last one is still writing expects what that
        # one wrote, not the revision they both started from (a conflict with itself).
        async with self._saves.in_order:
            if self._unmarked is not None:
                epoch, revision = self._unmarked
                await self._commit(_saved_as(revision), epoch=epoch)
                self._unmarked = None
            snap = await self._refresh()
            # As this instance shows it: with the outcomes of its summarizer calls whose
            # writes are still on their way (a failure that degraded it, say), which the
            # state read from Redis may not hold yet (SER-005: a hydrate must show the same
            # health).
            state = self._state()
            data = schema.dump(state, self._config)
            current = state.revision
            data["revision"] = current + 1
            data["storage_key"] = key
            conditional = getattr(store, "save_memory_state_if", None)
            if conditional is not None:
                expected = current if state.stored else None
                await conditional(key, data, expected_revision=expected)
            else:
                await store.save_memory_state(key, data)
            # Not into a state loaded since (another instance's hydrate or from_dict): it
            # has a revision of its own, from its own record.
            self._unmarked = (snap.epoch, current + 1)
            await self._commit(_saved_as(current + 1), epoch=snap.epoch)
            self._unmarked = None

    async def hydrate(self, store: Any, key: str) -> None:
        """Load through ``store.load_memory_state``; refuse another key's state (KEY-007).

        Raises:
            RuntimeError: the memory was closed.
        """
        if not hasattr(store, "load_memory_state"):
            return
        with self._counted("hydrate"):
            await self._hydrate(store, key)

    async def _hydrate(self, store: Any, key: str) -> None:
        data = await store.load_memory_state(key)
        if not saved_for(data, key):
            return
        try:
            self._replace(data, stored=True)
        except schema.KeyMismatchError as exc:
            logger.warning("refusing to hydrate %r: %s", key, exc)
            return
        await self._apply_replace()

    def get_artifact(self, ref: str) -> Any | None:
        """Hidden artifacts are not stored by this backend."""
        del ref
        return None

    @property
    def dropped_turns(self) -> int:
        """Turns dropped from a full DEGRADED backlog (HLT-005)."""
        return self._state().dropped_turns

    # -- state in Redis ------------------------------------------------------------------

    def _empty(self) -> MemoryState:
        config = self._config
        return MemoryState(
            health=HealthMachine(
                config.retry_attempts, config.retry_backoff_base_s, config.degraded_retry_interval_s
            ),
            key=self._key,
        )

    def _state(self) -> MemoryState:
        snap, outcomes = self._snap, self._outcomes
        base = snap.state if snap is not None else self._empty()
        if not outcomes or snap is None or (snap.fence, snap.epoch) != self._outcomes_for:
            return base
        shown = self._shown
        numbers = tuple(n for n, _ in outcomes)
        if shown is None or shown[0] != snap.rev or shown[1] != numbers:
            # A state read after an outcome's write landed, and before its reply came,
            # holds that outcome already: applied again, a failure would count twice.
            held = self._outcome_in(snap)
            try:
                state = snap.state.copy()
                for n, outcome in outcomes:
                    if n > held:
                        outcome(state)
            except (_Stale, RedisMemoryError):
                return base
            shown = self._shown = (snap.rev, numbers, state)
        return shown[2]

    def _outcome_mark(self, n: int) -> str:
        return f"{self._owner}#{n}"

    def _outcome_in(self, snap: _Snapshot) -> int:
        """The number of this instance's last outcome ``snap`` holds (0: none)."""
        owner, _, n = snap.outcome.rpartition("#")
        return int(n) if owner == self._owner and n.isdigit() else 0

    def _encode(self, state: MemoryState, outcome: str = "") -> str:
        body = state_json.dump_json(
            state, self._config, self._turn_text, config_text=self._config_text
        )
        stored = "true" if state.stored else "false"
        not_before = _json_float(state.health.not_before)
        texts = self._turn_texts
        if len(texts) > 2 * (len(state.recent) + len(state.pending) + len(state.backlog)) + 64:
            live = {id(e) for part in (state.recent, state.pending, state.backlog) for e in part}
            self._turn_texts = {k: v for k, v in texts.items() if k in live}
        mark = f'"outcome":{json.dumps(outcome)},' if outcome else ""
        return f'{{"stored":{stored},"not_before":{not_before},{mark}"state":{body}}}'

    def _turn_text(self, entry: Entry) -> str:
        """The JSON text of a stored turn, made once per entry (entries never change)."""
        hit = self._turn_texts.get(id(entry))
        if hit is not None and hit[0] is entry:
            return hit[1]
        text = state_json.turn_json(entry)
        self._turn_texts[id(entry)] = (entry, text)
        return text

    def _decode(self, doc: str) -> tuple[MemoryState, str]:
        """The state in ``doc`` and the mark of the last outcome written into it."""
        if not doc:
            return self._empty(), ""
        try:
            envelope = json.loads(doc)
            state = schema.load(
                envelope["state"], self._config, self._budget, self._key, shared=True
            )
            state.stored = bool(envelope.get("stored", False))
            state.health.not_before = float(envelope.get("not_before", 0.0))
            outcome = envelope.get("outcome", "")
            if not isinstance(outcome, str):
                raise TypeError(f"outcome must be a string, not {type(outcome).__name__}")
        except Exception as exc:
            raise RedisMemoryError(
                f"stored state cannot be loaded: {type(exc).__name__}: {exc}",
                key=self._keys.state,
            ) from exc
        return state, outcome

    def _snapshot(self, reply: Any) -> _Snapshot:
        """A snapshot from a ``{status, rev, fence, epoch, nb, doc, now}`` reply."""
        try:
            rev, fence, epoch = (_counter(reply[i]) for i in (1, 2, 3))
            doc = _text(reply[5])
            read_at = _counter(reply[6]) if len(reply) > 6 else 0
        except (ValueError, IndexError, TypeError) as exc:  # UnicodeDecodeError included
            raise RedisMemoryError(
                f"stored state hash is corrupt: {type(exc).__name__}: {exc}",
                key=self._keys.state,
            ) from exc
        state, outcome = self._decode(doc)
        return _Snapshot(
            rev=str(rev), fence=fence, epoch=epoch, state=state, outcome=outcome, read_at=read_at
        )

    def _adopt(self, snap: _Snapshot) -> None:
        """Keep the newest snapshot; a pending ``from_dict`` stays visible until written.

        Revision ``0`` is a session with no state hash (expired, say): newer than any
        state this instance saw. A hash made afresh starts its revisions above those of
        its earlier life (``scripts._COUNTERS``).

        A lower revision is an older read whose reply came late (replies on different
        connections can overtake each other), unless the server read it after the time
        the known revision stands for (a revision is at least the server's clock when
        it was given out): then the server lost that revision, rolled back to an older
        snapshot, and what it holds now is the state."""
        if self._pending_doc is not None:
            return
        current = self._snap
        if current is None or snap.rev == "0":
            self._snap = snap
            return
        known = int(current.rev)
        if int(snap.rev) >= known or snap.read_at > known > 0:
            self._snap = snap

    async def _script(
        self,
        lua: scripts.Lua,
        args: list[Any],
        *,
        turn_id: str | None = None,
        keys: tuple[bytes, ...] | None = None,
    ) -> Any:
        """Run one script and map errors; after ``SCRIPT FLUSH`` or a restart emptied the
        server's script cache, ``EVAL`` sends it again (and caches it) in one more trip.

        A lost reply leaves a write's outcome unknown (``recorded=None``); a refused script
        wrote nothing (``recorded=False``).
        """
        if self._client_closed:
            raise RuntimeError("a closed memory sends no command to Redis")
        self.round_trips += 1
        keys = self._key_bytes if keys is None else keys
        # ``execute_command`` directly: ``Script.__call__`` costs as much again per call.
        execute: Callable[..., Awaitable[Any]] = self._client.execute_command
        task, cancels = _cancels()
        try:
            try:
                reply = await execute(b"EVALSHA", lua.sha, len(keys), *keys, *args)
            except redis_errors.NoScriptError:  # nothing ran: sending it whole is safe
                self.round_trips += 1
                reply = await execute(b"EVAL", lua.source, len(keys), *keys, *args)
            _raise_if_cancelled_meanwhile(task, cancels)
            return reply
        except _UNAVAILABLE as exc:
            raise RedisUnavailableError(
                f"Redis unavailable: {type(exc).__name__}: {exc}",
                key=self._keys.state,
                turn_id=turn_id,
            ) from exc
        except redis_errors.RedisError as exc:
            raise RedisMemoryError(
                f"Redis refused the operation: {type(exc).__name__}: {exc}",
                key=self._keys.state,
                turn_id=turn_id,
                recorded=False if turn_id is not None else None,
            ) from exc
        except UnicodeDecodeError as exc:
            # A client made with ``decode_responses=True`` decodes the reply itself: a
            # stored state that is not UTF-8 fails there, after the script ran.
            raise RedisMemoryError(
                f"stored state hash is corrupt: {type(exc).__name__}: {exc}",
                key=self._keys.state,
                turn_id=turn_id,
            ) from exc

    async def _refresh(self) -> _Snapshot:
        """Read the state in one round trip (only the revision travels if unchanged)."""
        if self._pending_doc is not None:
            await self._apply_replace()
        while True:
            known = self._snap.rev if self._snap is not None else "-1"
            # READ only touches the state hash; one key is one argument less to send.
            reply = _fields(await self._script(_READ, [known], keys=self._key_bytes[:1]))
            if _text(reply[0]) != "same":
                self._adopt(self._snapshot(reply))
            if self._snap is not None:
                return self._snap

    async def _commit(
        self,
        apply: Callable[[MemoryState], _T],
        *,
        turn_id: str | None = None,
        fence: int | None = None,
        epoch: int | None = None,
        lease_if: Callable[[MemoryState], bool] | None = None,
        outcome: int = 0,
        wid: str | None = None,
    ) -> tuple[str, _T | None, _Snapshot | None]:
        """:meth:`_write`, one at a time per instance."""
        async with self._write_lock:
            return await self._write(
                apply,
                turn_id=turn_id,
                fence=fence,
                epoch=epoch,
                lease_if=lease_if,
                outcome=outcome,
                wid=wid,
            )

    async def _write(
        self,
        apply: Callable[[MemoryState], _T],
        *,
        turn_id: str | None = None,
        fence: int | None = None,
        epoch: int | None = None,
        lease_if: Callable[[MemoryState], bool] | None = None,
        outcome: int = 0,
        wid: str | None = None,
    ) -> tuple[str, _T | None, _Snapshot | None]:
        """Apply ``apply`` to the latest state and compare-and-set it, retrying on conflict.

        ``apply`` mutates a fresh copy and may raise (nothing is written). Returns
        ``("ok", result, snapshot written)``, or ``("dup" | "fenced" | "stale", None, None)``
        when the turn id was recorded already, another worker holds the lease, or the epoch moved.
        When ``lease_if(state)`` holds, the same script takes the summarizer lease if it is
        free and hands it to this instance's worker. A nonzero ``outcome`` is the number of
        the summarizer outcome ``apply`` is, which the synchronous accessors already show
        (``self._outcomes``); once written it is dropped from there in the same step.

        Every attempt carries the same write id (``wid``, default a fresh one): a command
        sent again after its reply was lost (by redis-py's own retry, or a caller retrying
        with the id of the write that failed) is recognised as written, not applied twice.
        """
        fresh = self._snap is None or self._pending_doc is not None
        if fresh:
            await self._refresh_for(turn_id)
        snap = self._snap
        assert snap is not None
        wid = wid or os.urandom(8).hex()
        for attempt in range(self._max_attempts):
            if epoch is not None and snap.epoch != epoch:
                return "stale", None, None
            state = snap.state.copy()  # ``apply`` may raise: the snapshot stays as it was
            try:
                result = apply(state)
            except MemoryBudgetExceeded:
                if fresh:
                    if turn_id is not None and await self._recorded_already(turn_id):
                        return "dup", None, None  # a retry of a stored turn: not refused
                    raise
                # Judged on what this instance read last: another may have made room
                # since (a summary, clear()). Judge the state as it is now.
                snap, fresh = await self._refresh_for(turn_id), True
                continue
            mark = self._outcome_mark(outcome) if outcome else snap.outcome
            doc = self._encode(state, mark)
            lease = lease_if is not None and lease_if(state)
            args = self._commit_args(
                doc,
                state,
                expected=snap.rev,
                turn_id=turn_id,
                fence=fence,
                lease=lease,
                wid=wid,
            )
            asked = time.monotonic()
            reply = _fields(await self._script(_COMMIT, args, turn_id=turn_id))
            status = _text(reply[0])
            if status == "ok" or status == "replayed":
                if outcome and (outcome, apply) in self._outcomes:
                    # Written: no longer shown on top of the state (same step as adopting).
                    self._outcomes.remove((outcome, apply))
                    self._shown = None
                if status == "ok":
                    committed = _Snapshot(
                        rev=_text(reply[1]),
                        fence=int(_text(reply[2])),
                        epoch=int(_text(reply[3])),
                        state=state,
                        outcome=mark,
                    )
                    self._adopt(committed)
                    if _text(reply[4]) == "1":
                        self._handoff = (committed, f"{self._owner}/{committed.fence}", asked)
                else:
                    # Written by this very write, whose reply was lost; the state may have
                    # moved on since. A lease it took is this instance's if its token
                    # still holds it.
                    committed = self._snapshot(reply)
                    self._adopt(committed)
                    token = f"{self._owner}/{committed.fence}"
                    with contextlib.suppress(RedisMemoryError):  # then it expires unused
                        if lease and await self._script(_RENEW, [token, self._lease_ms]):
                            self._handoff = (committed, token, asked)
                self._notify()
                return "ok", result, committed
            snap, fresh = self._snapshot(reply), True
            self._adopt(snap)
            if status in ("dup", "fenced"):
                return status, None, None
            if attempt >= 2:
                await asyncio.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempt)))
        raise RedisContentionError(
            f"compare-and-set lost {self._max_attempts} times in a row",
            key=self._keys.state,
            turn_id=turn_id,
            recorded=False if turn_id is not None else None,
        )

    async def _recorded_already(self, turn_id: str) -> bool:
        """:meth:`turn_recorded` before refusing a turn: a failure leaves it unknown."""
        try:
            return await self._turn_recorded(turn_id)  # part of a call already counted
        except RedisMemoryError as exc:
            exc.turn_id, exc.recorded = turn_id, None
            raise

    async def _refresh_for(self, turn_id: str | None) -> _Snapshot:
        """:meth:`_refresh` before a write of ``turn_id``: a failure leaves it unrecorded."""
        try:
            return await self._refresh()
        except RedisMemoryError as exc:
            if turn_id is not None:  # nothing was sent yet: the turn is not recorded
                exc.turn_id, exc.recorded = turn_id, False
            raise

    def _replace(self, data: Mapping[str, Any], *, stored: bool) -> None:
        if self._client_closed:  # a hydrate that outlasted the close grace: shown, never written
            raise RuntimeError("a closed memory sends no command to Redis")
        state = schema.load(data, self._config, self._budget, self._key)
        state.stored = stored
        # Timers restart from now, as in the reference: loading a state in RETRY again
        # and again must not bring its retries sooner (HLT-002, HLT-006).
        state.health.restart_timers(time.time())
        doc = self._encode(state)
        rid = os.urandom(8).hex()
        if self._sync_commit is not None:
            if self._client_closed:
                raise RuntimeError("a closed memory sends no command to Redis")
            self.round_trips += 1
            asked = time.monotonic()
            try:
                reply = self._sync_commit(
                    keys=self._keys.all(), args=self._replace_args(doc, state, rid)
                )
            except _UNAVAILABLE as exc:
                raise RedisUnavailableError(
                    f"Redis unavailable: {type(exc).__name__}: {exc}", key=self._keys.state
                ) from exc
            except redis_errors.RedisError as exc:
                raise RedisMemoryError(
                    f"Redis refused the operation: {type(exc).__name__}: {exc}",
                    key=self._keys.state,
                ) from exc
            # Written: from here on the state is replaced. A refused write replaced
            # nothing, and a call in flight goes on belonging to the state it was sent.
            self._begin_replacement()
            self._pending_doc = None
            self._snap = self._replaced(reply, state, asked)
            self._notify()
            if self._config.strategy == "rolling_summary":
                self._wake()
            return
        self._begin_replacement()  # shown at once, written before the next call
        self._pending_doc, self._pending_rid = doc, rid
        self._snap = _Snapshot(rev="-1", fence=0, epoch=-1, state=state)
        self._notify()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # written by the next call
        if not self._closed and (self._replace_task is None or self._replace_task.done()):
            self._replace_task = loop.create_task(self._replace_in_background())

    def _begin_replacement(self) -> None:
        """A call in flight now belongs to the replaced state: its outcome is dropped
        (WM-004), and no outcome on its way is shown on the new state."""
        self._replacements += 1
        self._outcomes.clear()
        self._shown = None

    def _replace_args(self, doc: str, state: MemoryState, rid: str) -> list[str]:
        """COMMIT arguments writing ``doc`` unconditionally as a new epoch, replacement
        ``rid``, with the turn ids the state holds (those of the replaced history go)."""
        args = self._commit_args(doc, state, bump=rid, lease=self._wants_lease(state), wid=rid)
        for entry in (*state.pending, *state.recent, *state.backlog):
            if entry.turn.turn_id is not None:
                args += (entry.turn.turn_id, str(entry.seq))
        args += (item for tid in state.departed for item in (tid, "0"))
        return args

    def _commit_args(
        self,
        doc: str,
        state: MemoryState,
        *,
        expected: str = "*",
        turn_id: str | None = None,
        fence: int | None = None,
        bump: str = "",
        lease: bool = False,
        wid: str,
    ) -> list[str]:
        """The arguments of :data:`scripts.COMMIT` writing ``doc`` (the state ``state``)
        as the write with id ``wid``."""
        params = (
            expected,
            repr(state.health.not_before),
            self._ttl_ms,
            str(state.next_seq - 1),
            "-" if fence is None else str(fence),
            f"bump:{bump}" if bump else "-",
            self._ids_kept,
            self._owner if lease else "-",
            self._lease_ms,
            wid,
        )
        return [doc, turn_id or "", " ".join(params)]

    def _replaced(self, reply: Any, state: MemoryState, asked: float) -> _Snapshot:
        reply = _fields(reply)
        if _text(reply[0]) == "replayed":
            # Written by the attempt whose reply was lost; the state has moved on since.
            return self._snapshot(reply)
        written = _Snapshot(
            rev=_text(reply[1]),
            fence=int(_text(reply[2])),
            epoch=int(_text(reply[3])),
            state=state,
        )
        if _text(reply[4]) == "1":
            self._handoff = (written, f"{self._owner}/{written.fence}", asked)
        return written

    async def _replace_in_background(self) -> None:
        try:
            await self._apply_replace()
        except RedisMemoryError as exc:
            logger.warning("writing the state loaded by from_dict failed (retried later): %s", exc)

    async def _apply_replace(self) -> None:
        """Write the state given to ``from_dict``, as a new epoch (timers start over)."""
        if self._pending_doc is None:
            return
        async with self._replace_lock:
            while (doc := self._pending_doc) is not None:
                assert self._snap is not None
                state, rid = self._snap.state, self._pending_rid
                asked = time.monotonic()
                reply = await self._script(_COMMIT, self._replace_args(doc, state, rid))
                written = self._replaced(reply, state, asked)
                if self._pending_doc is doc:
                    self._pending_doc = None
                    self._snap = written
        self._notify()
        if self._config.strategy == "rolling_summary":
            self._wake()

    # -- the summarizer ------------------------------------------------------------------

    def _wants_lease(self, state: MemoryState) -> bool:
        """Whether a write should take the summarizer lease in the same round trip: it
        leaves work for a summarizer call now and no worker of this instance has a lease."""
        return (
            self._config.strategy == "rolling_summary"
            and not self._closed
            and self._handoff is None
            and watermark.take_batch(state) is not None
            and state.health.wait_s(time.time()) <= 0
        )

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _transition(self, change: Transition) -> None:
        old, new = change
        if old is not new:
            logger.info("summarizer health %s -> %s (%s)", old.value, new.value, self._keys.state)
            self._on_health.emit(old, new)

    def _wake(self) -> None:
        if self._closed or (self._worker is not None and not self._worker.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._crash = None
        self._worker = loop.create_task(self._work(), name="stm-redis-summarizer")
        self._worker.add_done_callback(self._worker_ended)

    def _worker_ended(self, task: asyncio.Task[None]) -> None:
        if (crash := worker_crash(task, self._worker, logger)) is not None:
            self._crash = crash
            self._notify()  # flush() waiters see it

    async def _sleep(self, delay: float) -> None:
        changed = self._changed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await changed.wait()

    async def _work(self) -> None:
        """Summarize while there is work, one lease holder per session at a time (WM-004)."""
        failures = 0
        while not self._closed:
            try:
                handoff: tuple[_Snapshot | None, str, float] | None = self._handoff
                self._handoff = None
                if handoff is None:
                    handoff = await self._lease()
                    if handoff is None:
                        return
                leased, token, asked = handoff
                if leased is None:
                    continue
                try:
                    await self._hold(leased, token, asked)
                finally:
                    # Not once aclose() gave up on the server: the lease then expires.
                    if not self._client_closed:
                        with contextlib.suppress(RedisMemoryError):
                            await self._script(_RELEASE, [token])
                failures = 0
            except RedisMemoryError as exc:
                failures += 1
                logger.warning("summarizer worker: %s", exc)
                # Capped exponent: hours of outage must not overflow the float.
                await self._sleep(min(2.0, self._poll_s * 2.0 ** min(failures, 16)))

    async def _lease(self) -> tuple[_Snapshot | None, str, float] | None:
        """Take the lease when there is work: ``None`` when there is none, ``(None, "", 0)``
        after waiting (for a retry timer or another holder) so the caller looks again."""
        await self._apply_replace()
        snap = self._snap if self._snap is not None else await self._refresh()
        state = snap.state
        if watermark.take_batch(state) is None:
            return None  # the worker is woken by whatever leaves work
        delay = state.health.wait_s(time.time())
        if delay > self._lease_s / 3:
            await self._sleep(delay)  # long waits are spent without the lease
            return None, "", 0.0
        asked = time.monotonic()
        reply = await self._script(_ACQUIRE, [self._owner, self._lease_ms, self._ttl_ms])
        if _text(reply[0]) == "held":
            await self._sleep(min(max(1, int(_text(reply[1]))) / 1000, self._poll_s))
            return None, "", 0.0
        leased = self._snapshot(reply)
        self._adopt(leased)
        return leased, f"{self._owner}/{leased.fence}", asked

    async def _hold(self, leased: _Snapshot, token: str, asked: float) -> None:
        """Summarize under one lease while the next call may start soon.

        As in the reference, a call's outcome shows (through the synchronous accessors)
        from the moment the call returns, and the next call starts in that same step; the
        outcome is written, fenced, while the next call runs. Short retry and recovery
        waits are spent holding the lease, so the call starts as its timer fires.
        """
        fence, epoch = leased.fence, leased.epoch
        self._outcomes_for = (fence, epoch)
        replacements = self._replacements
        loop = asyncio.get_running_loop()
        #: Until when the lease is sure to be held; a call starts only before then (one
        #: summarizer call per session at a time), the renewals move it on.
        held_until = [asked + self._lease_s]
        renewer = loop.create_task(self._renew(token, held_until))

        def lease_lost() -> bool:
            return renewer.done() or time.monotonic() >= held_until[0]

        writing: asyncio.Task[bool] | None = None
        batch: watermark.Batch | None = None
        begun = False  # this worker has begun a recovery attempt it has not made yet

        def numbered(apply: Callable[[MemoryState], Any]) -> _Outcome:
            """``apply`` numbered and shown on top of the state until written."""
            self._outcome_count += 1
            outcome = (self._outcome_count, apply)
            self._outcomes.append(outcome)
            self._shown = None
            return outcome

        def write(outcome: _Outcome, summary: str | None) -> asyncio.Task[bool]:
            task = loop.create_task(self._write_outcome(outcome, summary, fence, epoch))
            task.add_done_callback(lambda _: self._notify())
            return task

        try:
            while not self._closed and self._replacements == replacements:
                changed = self._changed
                if writing is not None and writing.done():
                    if not writing.result():
                        return
                    writing = None
                snap = self._snap
                if snap is None or snap.epoch != epoch or snap.fence > fence:
                    # Replaced, cleared or taken over since the lease was taken: no call
                    # made now could be installed, and its turns would be sent again.
                    break
                if batch is None:
                    batch = self._next_batch(begun)
                if batch is None:
                    if writing is not None:
                        await changed.wait()  # a turn added meanwhile may need a call
                        continue
                    shown = self._state()
                    if watermark.take_batch(shown) is None:
                        break
                    delay = shown.health.wait_s(time.time())
                    if delay > self._lease_s / 3:
                        break  # a long wait: release the lease meanwhile
                    if delay > 0:
                        await asyncio.sleep(delay)
                        continue
                    if shown.health.state is not MemoryHealth.DEGRADED or lease_lost():
                        break
                    # RECOVERING, shown at once
                    writing = write(numbered(_begin(time.time())), None)
                    begun = True
                    continue
                if lease_lost():
                    break
                if held_until[0] - time.monotonic() < self._lease_s / 2:
                    # Less than half the lease is left (the worker started long after it
                    # was taken, or the loop was starved): renewed first, so that it
                    # cannot run out under the call before a renewal comes.
                    if not await self._renew_once(token, held_until):
                        break
                    batch = None  # looked at again: the state may have moved meanwhile
                    continue
                summary, error = await self._call(batch)
                begun = False
                if self._replacements != replacements:
                    return  # from_dict replaced the state during the call (WM-004)
                finish = numbered(self._finish(batch, summary, error))
                batch = None
                if writing is not None and not await writing:
                    return
                writing = write(finish, summary)
            if writing is not None:
                await writing
        finally:
            self._outcomes.clear()
            self._shown = None
            for task in (renewer, writing):
                if task is not None and not task.done():
                    task.cancel()
            await asyncio.gather(
                *(t for t in (renewer, writing) if t is not None), return_exceptions=True
            )

    def _next_batch(self, begun: bool) -> watermark.Batch | None:
        """The next call's turns if it may start now (outcomes not yet written included).

        ``begun``: this worker has just begun a recovery attempt, which starts now (its
        timer already counts to the attempt after it). A state RECOVERING otherwise was
        loaded so, or begun by a worker since gone: it waits out its timer like a state
        DEGRADED, so that loading never brings an attempt sooner (HLT-006).
        """
        shown = self._state()
        health = shown.health
        if health.state is MemoryHealth.DEGRADED:
            return None
        if (
            not (begun and health.state is MemoryHealth.RECOVERING)
            and health.wait_s(time.time()) > 0
        ):
            return None
        return watermark.take_batch(shown)

    def _finish(
        self, batch: watermark.Batch, summary: str | None, error: str | None
    ) -> Callable[[MemoryState], tuple[str | None, str, Transition]]:
        """The outcome of one call, as a change to apply to the newest state.

        Timers count from when the call returned, however late the write lands.
        """
        now = time.time()

        def finish(latest: MemoryState) -> tuple[str | None, str, Transition]:
            if latest.health.degraded != batch.recovering:
                raise _Stale
            if latest.summarized_through >= batch.through or (
                latest.recent and latest.recent[0].seq <= batch.through
            ):
                # Not a state the batch's turns wait in: covered already, or still recent
                # (a server rolled back to before they were evicted). Installing would
                # count recent turns as summarized.
                raise _Stale
            if not batch.recovering:
                # The call may have started on outcomes shown but not yet written (the
                # next call starts as the last returns). If one of them was refused, an
                # older turn than the batch's is still pending: installing would take it
                # off without a summary for it (WM-003). The batch is sent again instead.
                sent = {entry.seq for entry in batch.entries}
                for entry in latest.pending:
                    if entry.seq > batch.through:
                        break
                    if entry.seq not in sent:
                        raise _Stale
            reason = error
            if reason is None:
                assert summary is not None
                reason = self._budget.refuse_summary(latest, batch, summary)
            old = latest.summary
            if reason is None:
                assert summary is not None
                dropped = 0 if batch.recovering else _dropped_since(latest, batch)
                watermark.install(latest, batch, summary)
                latest.dropped_turns -= dropped
                change = latest.health.on_success()
            else:
                change = latest.health.on_failure(now)
                if change[1] is MemoryHealth.DEGRADED and change[0] is not MemoryHealth.RECOVERING:
                    watermark.degrade(latest, self._config)
            try:
                self._budget.settle(latest)
            except Exception:  # the estimator, on the view: trimmed at the next turn
                logger.exception("token_estimator raised bringing the view within budget")
            return reason, old, change

        return finish

    async def _write_outcome(
        self,
        outcome: _Outcome,
        summary: str | None,
        fence: int,
        epoch: int,
    ) -> bool:
        """Write one numbered outcome, fenced; whether it was written.

        Sent again, with the same write id, when Redis did not answer: a write that landed
        is then found made, and its callbacks run (CB-002, CB-003).
        """
        number, finish = outcome
        wid = os.urandom(8).hex()
        for attempt in range(_OUTCOME_ATTEMPTS):
            try:
                status, result, _ = await self._commit(
                    finish, fence=fence, epoch=epoch, outcome=number, wid=wid
                )
            except _Stale:
                status, result = "stale", None
            except RedisUnavailableError:
                if attempt + 1 == _OUTCOME_ATTEMPTS:
                    raise
                await asyncio.sleep(self._poll_s * 2**attempt)
                continue
            break
        if status != "ok" or result is None:
            logger.info("summarizer outcome discarded (%s): %s", status, self._keys.state)
            if outcome in self._outcomes:  # refused: no longer shown
                self._outcomes.remove(outcome)
                self._shown = None
            return False
        reason, old, change = result
        if reason is None and summary is not None:
            self._on_summary.emit(old, summary)
        elif reason is not None:
            logger.warning("summarizer call failed: %s", reason)
        self._transition(change)
        return True

    async def _renew(self, token: str, held_until: list[float]) -> None:
        """Renew the lease once a third of it is used (counted from when it was last
        taken or renewed, however late this task starts), moving ``held_until`` on;
        ends when the lease is found lost."""
        task = asyncio.current_task()
        while task is None or not task.cancelling():  # a swallowed cancel still ends it
            due = held_until[0] - self._lease_s * 2 / 3 - time.monotonic()
            await asyncio.sleep(max(due, self._lease_s / 10))
            if await self._renew_once(token, held_until) is False:
                return

    async def _renew_once(self, token: str, held_until: list[float]) -> bool | None:
        """Renew the lease now: ``True`` when renewed (``held_until`` moves on), ``False``
        when it is lost, ``None`` when Redis did not answer."""
        asked = time.monotonic()
        try:
            held = await self._script(_RENEW, [token, self._lease_ms])
        except RedisMemoryError as exc:
            logger.warning("could not renew the summarizer lease: %s", exc)
            return None
        if not held:
            logger.warning("summarizer lease lost: %s", self._keys.state)
            return False
        held_until[0] = asked + self._lease_s
        return True

    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        """Run one summarizer call; returns ``(summary, None)`` or ``(None, reason)``."""
        assert self._summarizer is not None
        return await call_summarizer(
            self._summarizer, batch, self._config.summarizer_timeout_s, self._abandoned
        )


def _dropped_since(latest: MemoryState, batch: watermark.Batch) -> int:
    """How many turns of an ordinary batch ``latest`` dropped from a full backlog since the
    batch was taken (from a state read before): its summary covers them, so they are not
    lost after all (HLT-005), as ``watermark.install`` counts for a recovery."""
    held = {e.seq for part in (latest.pending, latest.backlog) for e in part}
    return sum(e.seq > latest.summarized_through and e.seq not in held for e in batch.entries)


def _saved_as(revision: int) -> Callable[[MemoryState], None]:
    """The change that records a state as stored by a store with ``revision``; never a
    revision back (a later save may have landed first)."""

    def mark(latest: MemoryState) -> None:
        latest.revision = max(latest.revision, revision)
        latest.stored = True

    return mark


def _cancels() -> tuple[asyncio.Task[Any] | None, int]:
    """The current task and how many cancellations it has pending, before a command."""
    task = asyncio.current_task()
    return task, task.cancelling() if task is not None else 0


def _raise_if_cancelled_meanwhile(task: asyncio.Task[Any] | None, cancels: int) -> None:
    """Raise ``CancelledError`` if ``task`` was cancelled during a command that returned.

    redis-py sends through ``asyncio.wait_for`` (its socket timeout), which on CPython 3.11
    swallows a cancellation arriving as the send completes: the command then returns
    normally to a cancelled task. Cancelled is cancelled: a lease renewer that went on
    would renew its lease forever, and the worker would wait for it.
    """
    if task is not None and task.cancelling() > cancels:
        raise asyncio.CancelledError


def _begin(now: float) -> Callable[[MemoryState], tuple[None, str, Transition]]:
    """A recovery attempt starting at ``now``: DEGRADED -> RECOVERING (HLT-006)."""

    def begin(latest: MemoryState) -> tuple[None, str, Transition]:
        if latest.health.state is not MemoryHealth.DEGRADED:
            raise _Stale
        return None, latest.summary, latest.health.begin_recovery(now)

    return begin
