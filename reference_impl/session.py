"""Session layer: one short-term memory per :class:`MemoryKey`, around each agent turn.

Framework-free equivalent of PenguiFlow's ReactPlanner memory integration
(``penguiflow.planner.memory_integration``). A :class:`MemoryRouter` resolves the key of
each call (spec group KEY), owns a bounded LRU of memories, serialises the turns of one key,
injects ``conversation_memory`` into the caller's ``llm_context`` and records a turn only
when the caller says the run finished. Persistence never loses an update: a stale write is
retried on a freshly hydrated memory with the router's unsaved turns re-applied.

Usage::

    router = MemoryRouter(config, store=store, summarizer=summarizer)
    async with router.turn(llm_context=ctx, tool_context=tool_ctx) as t:
        answer = await agent(query, t.llm_context)
        await t.finish(query, answer, tools=["search"], observations=[result])
    await router.aclose()

The router is bound to the asyncio event loop it is used on. See ``docs/session-layer.md``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import random
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Protocol

from .inputs import check_turn, check_turn_id
from .keys import resolve_memory_key
from .memory import DefaultShortTermMemory
from .store import StaleStateError, StateStore
from .types import (
    ConversationTurn,
    MemoryBudgetExceeded,
    MemoryKey,
    ShortTermMemoryConfig,
    TrajectoryDigest,
)

__all__ = [
    "DEFAULT_MAX_OBSERVATION_CHARS",
    "MemoryRouter",
    "MemoryTurn",
    "PersistConflictError",
    "RoutedMemory",
    "RouterStats",
    "build_trajectory_digest",
    "ephemeral_key",
]

logger = logging.getLogger("reference_impl.session")

#: Default cut of each observation in a :class:`TrajectoryDigest`, as in PenguiFlow.
DEFAULT_MAX_OBSERVATION_CHARS = 400

#: Upper bound of the first random pause before a conflict retry; attempt *n* waits up to
#: *n* times this. Jitter keeps two writers from colliding in lock step.
_CONFLICT_BACKOFF_S = 0.005

_ELLIPSIS = "…"

SummarizerFn = Callable[[Any], Awaitable[Mapping[str, Any]]]


class RoutedMemory(Protocol):
    """What the router needs of a memory: the core protocol, persistence and ``aclose``.

    ``aclose`` must be idempotent. ``persist`` should do a conditional save when the store
    offers one and raise :class:`StaleStateError` on conflict, as ``DefaultShortTermMemory``
    does; otherwise writers on one key overwrite each other.
    """

    async def add_turn(self, turn: ConversationTurn) -> None: ...

    async def get_llm_context(self) -> Mapping[str, Any]: ...

    async def flush(self) -> None: ...

    async def aclose(self) -> None: ...

    async def persist(self, store: Any, key: str) -> None: ...

    async def hydrate(self, store: Any, key: str) -> None: ...


MemoryFactory = Callable[[MemoryKey], RoutedMemory]


class PersistConflictError(StaleStateError):
    """A save stayed stale after ``conflict_retries`` re-hydrate-and-retry rounds.

    The turns not yet saved stay in the router's memory and are saved again with the next
    persist of that key (or lost, counted in :attr:`RouterStats.lost_turns`, if the memory
    is evicted or closed before a save succeeds).
    """

    def __init__(
        self, key: str, *, attempts: int, expected: int | None, actual: int | None
    ) -> None:
        super().__init__(key, expected=expected, actual=actual)
        self.attempts = attempts


@dataclass(slots=True)
class RouterStats:
    """Counters of one router, for monitoring and tests."""

    #: Memories created for a key and loaded from the store (first use or after a conflict).
    hydrations: int = 0
    #: Successful saves.
    persists: int = 0
    #: Saves refused as stale and retried on a re-hydrated memory.
    conflicts: int = 0
    #: Saves that stayed stale after every retry (each raised :class:`PersistConflictError`).
    conflict_failures: int = 0
    #: Memories evicted from the LRU.
    evictions: int = 0
    #: Turns recorded by :meth:`MemoryTurn.finish`.
    turns_recorded: int = 0
    #: Ephemeral keys minted for anonymous calls.
    ephemeral_keys: int = 0
    #: Turns run with memory disabled (no key, or strategy ``"none"``).
    disabled_turns: int = 0
    #: Unsaved turns that could not be re-applied after a conflict (e.g. budget ``error``).
    dropped_turns: int = 0
    #: Unsaved turns found in the store after a conflict (a save that landed but raised),
    #: so not applied twice.
    already_saved_turns: int = 0
    #: ``finish`` calls with the ``turn_id`` of a turn the memory already holds: the turn
    #: was not recorded again (a retried ``finish``).
    repeated_turns: int = 0
    #: Unsaved turns given up when their memory was evicted or closed without a good save.
    lost_turns: int = 0


def ephemeral_key() -> MemoryKey:
    """A fresh key for one anonymous call.

    ``MemoryKey("default", "anonymous", "ephemeral-<uuid4>")``. Never shared: each call
    mints its own, so unrelated anonymous callers never meet.
    """
    return MemoryKey("default", "anonymous", f"ephemeral-{uuid.uuid4()}")


def _observation_text(observation: Any) -> str:
    if isinstance(observation, str):
        return observation
    try:
        return json.dumps(observation, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return str(observation)


def build_trajectory_digest(
    tools: Sequence[str],
    observations: Sequence[Any] = (),
    reasoning: str | None = None,
    max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS,
) -> TrajectoryDigest | None:
    """Digest of the tools a run used, or ``None`` when it used none (as PenguiFlow).

    ``observations[i]`` is what ``tools[i]`` returned (fewer observations than tools is
    allowed; the rest have none). Each observation becomes a line ``- <tool>: <text>``
    where ``<text>`` is the string itself or its JSON form; text longer than
    ``max_observation_chars`` is cut to its first ``max_observation_chars`` characters
    followed by ``"…"``.
    """
    if isinstance(tools, str) or not all(isinstance(t, str) for t in tools):
        raise TypeError("tools must be a sequence of str")
    if isinstance(observations, str | bytes):  # one observation, not one per character
        raise TypeError("observations must be a sequence, one per tool, not a str")
    if len(observations) > len(tools):
        raise ValueError("more observations than tools")
    if reasoning is not None and not isinstance(reasoning, str):
        raise TypeError("reasoning must be a str or None")
    if type(max_observation_chars) is not int:  # NaN would never cut, True would cut to 1
        raise TypeError("max_observation_chars must be an int")
    if max_observation_chars < 0:
        raise ValueError("max_observation_chars must be >= 0")
    if not tools:
        return None
    lines = []
    for tool, observation in zip(tools, observations, strict=False):
        text = _observation_text(observation)
        if len(text) > max_observation_chars:
            text = text[:max_observation_chars] + _ELLIPSIS
        lines.append(f"- {tool}: {text}")
    return TrajectoryDigest(
        tools_invoked=list(tools),
        observations_summary="\n".join(lines),
        reasoning_summary=reasoning,
    )


def _fingerprint(memory: RoutedMemory) -> object:
    """What tells whether a memory's state changed since: its change count and the memory
    itself when it keeps one (this package's does), else a digest of its state without the
    revision; ``None`` if it cannot say."""
    changes = getattr(memory, "changes", None)
    if type(changes) is int:
        return (memory, changes)  # the memory too: a swapped-in one counts from zero
    to_dict = getattr(memory, "to_dict", None)
    if to_dict is None:
        return None
    state = dict(to_dict())
    state.pop("revision", None)
    state.pop("storage_key", None)
    text = json.dumps(state, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


@dataclass(eq=False, slots=True)
class _Slot:
    """One key's memory in the router, with its lock and write-ahead list of turns."""

    key: MemoryKey
    composite: str
    memory: RoutedMemory
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Turns and flushes holding or waiting for this slot; only idle slots are evicted.
    users: int = 0
    hydrated: bool = False
    retired: bool = False
    #: Whether the memory changes by itself (a summarizer installs summaries in background).
    background: bool = False
    #: Fingerprint of the state last loaded or saved: an unchanged memory is not rewritten.
    saved: object = None
    #: Turns added since the last good save; re-applied after a conflict.
    unsaved: list[ConversationTurn] = field(default_factory=list)
    #: Bumped on every added turn and memory swap, so the flusher knows to go round again.
    generation: int = 0
    flusher: asyncio.Task[None] | None = None
    #: The save in flight, if any; it outlives a cancelled caller (see ``MemoryRouter._save``).
    saving: asyncio.Task[None] | None = None
    #: The task inside a turn on this key; re-locking from it would deadlock.
    owner: asyncio.Task[Any] | None = None
    #: What the retirement (eviction or close) of this slot raised, for a ``flush`` that
    #: waited for it; the retiring caller gets it too.
    retire_error: Exception | None = None

    def check_not_owner(self, action: str) -> None:
        if self.owner is not None and self.owner is asyncio.current_task():
            raise RuntimeError(f"{action} inside a turn on the same key would deadlock")

    def fingerprint(self) -> object:
        # Without background work only our own add_turn changes a memory, and ``unsaved``
        # already says that; skipping the digest keeps idle evictions cheap.
        return _fingerprint(self.memory) if self.background else ""

    def changed(self) -> bool:
        return bool(self.unsaved) or self.saved is None or self.fingerprint() != self.saved


TurnStatus = Literal["new", "open", "finished", "paused", "failed", "closed"]


class MemoryTurn:
    """One agent run with memory: an async context manager made by :meth:`MemoryRouter.turn`.

    Inside the block, :attr:`llm_context` is what to send to the model. Call
    :meth:`finish` when the run produced an answer (the turn is recorded and persisted at
    once), or :meth:`pause` when it stopped for input; a block left by an exception or
    without either call records nothing (an exception after ``finish`` does not undo it).
    The key's lock is held for the whole block, so runs on one key are serialised; a turn,
    ``flush`` or ``aclose`` on the same key from inside the block raises ``RuntimeError``.
    """

    def __init__(
        self, router: MemoryRouter, key: MemoryKey | None, llm_context: Mapping[str, Any] | None
    ) -> None:
        self._router = router
        self._slot: _Slot | None = None
        self._caller_context: Mapping[str, Any] = {} if llm_context is None else llm_context
        self._status: TurnStatus = "new"
        #: The key of this run; ``None`` when memory is disabled for it (KEY-006).
        self.key: MemoryKey | None = key
        #: The caller's ``llm_context`` with ``conversation_memory`` merged in (a new dict),
        #: or the caller's own object when nothing was injected.
        self.llm_context: Mapping[str, Any] = self._caller_context
        #: Whether ``conversation_memory`` was injected into :attr:`llm_context`.
        self.memory_injected = False

    @property
    def status(self) -> TurnStatus:
        """``new``, ``open``, ``finished``, ``paused``, ``failed`` (exception) or ``closed``."""
        return self._status

    async def __aenter__(self) -> MemoryTurn:
        if self._status != "new":
            raise RuntimeError("a MemoryTurn can be entered only once")
        self._status = "open"
        if self.key is None:
            return self
        self._slot = slot = await self._router._checkout(self.key)
        try:
            patch = await slot.memory.get_llm_context()
        except BaseException:
            await self._release()
            raise
        self.llm_context, self.memory_injected = _merge(
            self._caller_context,
            patch,
            self.key,
            trusted=type(slot.memory) is DefaultShortTermMemory,
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._status == "open":
            self._status = "failed" if exc_type is not None else "closed"
        await self._release()

    async def finish(
        self,
        user_message: str,
        assistant_response: str,
        *,
        trajectory: TrajectoryDigest | None = None,
        tools: Sequence[str] | None = None,
        observations: Sequence[Any] = (),
        reasoning: str | None = None,
        turn_id: str | None = None,
    ) -> ConversationTurn | None:
        """Record the finished turn and persist it; ``None`` when memory is disabled.

        Pass either a ready ``trajectory`` or ``tools``/``observations``/``reasoning`` for
        :func:`build_trajectory_digest`. The digest is dropped when the configuration has
        ``include_trajectory_digest=False``.

        The turn is stored with ``turn_id``, or a fresh random id. A ``finish`` with the id
        of a turn the key's memory already holds records nothing new (it saves what is
        unsaved): give the same id when retrying a turn whose ``finish`` raised, and it is
        recorded once.

        Raises:
            TypeError: text or a digest ``add_turn`` would refuse; nothing is recorded and
                the turn stays open, for a corrected ``finish``.
            MemoryBudgetExceeded: ``overflow_policy="error"`` and the turn does not fit;
                nothing is recorded and the turn stays open likewise.
            RuntimeError: outside the block, or after ``finish``/``pause``.
            PersistConflictError: the save stayed stale after every retry; the turn is
                kept in memory and saved with the key's next persist.
            StateStoreError: the store failed; the turn is kept in memory likewise.
        """
        self._require_open("finish")
        if not isinstance(user_message, str) or not isinstance(assistant_response, str):
            raise TypeError("user_message and assistant_response must be str")
        if trajectory is not None and (tools is not None or observations or reasoning is not None):
            raise ValueError("pass either trajectory or tools/observations/reasoning")
        if tools is None and (observations or reasoning is not None):
            raise ValueError("observations and reasoning need tools")
        check_turn_id(turn_id)
        digest = trajectory
        if tools is not None:
            digest = build_trajectory_digest(tools, observations, reasoning)
        if not self._router.config.include_trajectory_digest:
            digest = None
        turn = ConversationTurn(
            user_message=user_message,
            assistant_response=assistant_response,
            trajectory_digest=digest,
            ts=time.time(),
            turn_id=secrets.token_hex(16) if turn_id is None else turn_id,
        )
        check_turn(turn)  # refused here, the turn stays open for a corrected finish
        self._status = "finished"  # before any await: a second finish must fail
        if self._slot is None:
            return None
        try:
            await self._router._record(self._slot, turn, repeatable=turn_id is not None)
        except MemoryBudgetExceeded:
            self._status = "open"  # refused whole (BUD-006): nothing was recorded
            raise
        return turn

    def pause(self) -> None:
        """Mark the run as paused (waiting for the user): nothing is recorded."""
        self._require_open("pause")
        self._status = "paused"

    def _require_open(self, action: str) -> None:
        if self._status != "open":
            raise RuntimeError(f"cannot {action} a turn that is {self._status}")

    async def _release(self) -> None:
        slot, self._slot = self._slot, None
        if slot is not None:
            await self._router._checkin(slot)


def _merge(
    caller: Mapping[str, Any], patch: Mapping[str, Any], key: MemoryKey, *, trusted: bool
) -> tuple[Mapping[str, Any], bool]:
    """The caller's context with the memory patch on top, or the caller's unchanged.

    ``trusted``: the patch is this package's memory's, JSON by construction (its budget
    counts it as canonical JSON), so only the caller's part is checked, and a long
    conversation is not serialised once more per turn.
    """
    if not patch:
        return caller, False
    merged = dict(caller)  # a copy: the caller's mapping is never mutated
    merged.update(patch)
    checked = {k: v for k, v in caller.items() if k not in patch} if trusted else merged
    try:
        json.dumps(checked, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        # The model cannot be sent this context; run without memory rather than crash.
        logger.warning(
            "llm_context with memory is not JSON-serialisable; memory skipped for %s: %s: %s",
            key.composite(),
            type(exc).__name__,
            exc,
        )
        return caller, False
    return merged, True


class MemoryRouter:
    """Owns one short-term memory per :class:`MemoryKey` and runs turns against them.

    * Keys (KEY-003..006): an explicit ``memory_key`` wins; otherwise the dotted paths of
      ``config.isolation`` are read from ``tool_context`` (never ``llm_context``). With
      nothing resolvable, memory is off for the call when ``require_explicit_key`` is true;
      otherwise the call gets an :func:`ephemeral_key` of its own, minted per
      :meth:`turn` call (readable as ``t.key``; pass it back as ``memory_key`` to continue).
    * Memories: at most ``max_memories`` idle memories are kept; the least recently used
      is persisted (if changed), closed and dropped. Memories in use are never evicted,
      so the bound can be exceeded while more keys than that are in use at once.
    * Persistence: each finished turn is saved at once. With a store that has
      ``save_memory_state_if`` the save is conditional; on :class:`StaleStateError` the
      router hydrates a fresh memory, re-applies its unsaved turns and saves again, up to
      ``conflict_retries`` times, then raises :class:`PersistConflictError`. Saves are
      shielded from the caller's cancellation, so a write that lands anyway is accounted.
    * Summaries (``rolling_summary``): after each turn an owned task waits until no turn
      has come for ``summary_save_delay_s``, then for ``memory.flush()``, and saves the
      new summary if no turn's save took it along: turns that keep coming share the
      summary's commit instead of paying one more each. :meth:`flush` and :meth:`aclose`
      save at once.

    Without a store nothing is hydrated or saved, and an evicted memory is gone.
    """

    def __init__(
        self,
        config: ShortTermMemoryConfig,
        *,
        store: StateStore | None = None,
        summarizer: SummarizerFn | None = None,
        max_memories: int = 1024,
        memory_factory: MemoryFactory | None = None,
        conflict_retries: int = 3,
        summary_save_delay_s: float = 0.05,
    ) -> None:
        """Create a router.

        Args:
            config: configuration of every memory; its ``isolation`` drives key resolution.
            store: where memories are hydrated from and persisted to.
            summarizer: ``async (payload) -> {"summary": str}``, for ``rolling_summary``.
            max_memories: LRU bound on idle memories kept in process (>= 1).
            memory_factory: builds the memory of a key; default
                ``DefaultShortTermMemory(config=config, summarizer=summarizer, key=key)``.
            conflict_retries: re-hydrate-and-retry rounds after a stale save (>= 0).
            summary_save_delay_s: how long a key must go without a turn before a summary
                made in the background is saved alone rather than along with the next
                turn (>= 0 s). Losing it in a crash loses the summarizer's work, not a
                turn: the turns it covers stay stored as pending until a saved summary
                covers them.
        """
        if not isinstance(config, ShortTermMemoryConfig):
            raise TypeError("config must be a ShortTermMemoryConfig")
        if not isinstance(max_memories, int) or isinstance(max_memories, bool):
            raise TypeError("max_memories must be an int")
        if max_memories < 1:
            raise ValueError("max_memories must be >= 1")
        if not isinstance(conflict_retries, int) or isinstance(conflict_retries, bool):
            raise TypeError("conflict_retries must be an int")
        if conflict_retries < 0:
            raise ValueError("conflict_retries must be >= 0")
        if type(summary_save_delay_s) not in (int, float):
            raise TypeError("summary_save_delay_s must be a number of seconds")
        if not 0 <= summary_save_delay_s < math.inf:
            raise ValueError("summary_save_delay_s must be finite and >= 0")
        if memory_factory is None and config.strategy == "rolling_summary" and summarizer is None:
            raise ValueError("rolling_summary requires a summarizer (or a memory_factory)")
        self._config = config
        self._store = store
        self._summarizer = summarizer
        self._max = max_memories
        self._factory = memory_factory
        self._retries = conflict_retries
        self._summary_delay_s = float(summary_save_delay_s)
        # A router without a custom factory and strategy "none" has nothing to remember.
        self._disabled = memory_factory is None and config.strategy == "none"
        self._background = config.strategy == "rolling_summary"
        self._slots: OrderedDict[str, _Slot] = OrderedDict()
        #: Slots taken off the list and being retired, with the event set when they are.
        self._evicting: dict[str, tuple[_Slot, asyncio.Event]] = {}
        self._closed = False
        self.stats = RouterStats()

    @property
    def config(self) -> ShortTermMemoryConfig:
        """The configuration every memory of this router is built with."""
        return self._config

    @property
    def max_memories(self) -> int:
        """The LRU bound on idle memories kept in process."""
        return self._max

    def __len__(self) -> int:
        """Number of memories currently held in process."""
        return len(self._slots)

    def __bool__(self) -> bool:
        # A router is a resource, not a container: it stays truthy while empty.
        return True

    def loaded_keys(self) -> list[MemoryKey]:
        """Keys whose memory is held in process, least recently used first."""
        return [slot.key for slot in self._slots.values()]

    def resolve_key(
        self, *, memory_key: MemoryKey | None = None, tool_context: Any = None
    ) -> MemoryKey | None:
        """The key a call would use, minting an ephemeral key when allowed; ``None``: off."""
        if self._disabled:
            return None
        key = resolve_memory_key(
            self._config.isolation, memory_key=memory_key, tool_context=tool_context
        )
        if key is None and not self._config.isolation.require_explicit_key:
            key = ephemeral_key()
            self.stats.ephemeral_keys += 1
        return key

    def turn(
        self,
        *,
        llm_context: Mapping[str, Any] | None = None,
        tool_context: Any = None,
        memory_key: MemoryKey | None = None,
    ) -> MemoryTurn:
        """One agent run: ``async with router.turn(...) as t:``.

        The key is resolved now (see the class docstring); ``llm_context`` is only ever
        read to build ``t.llm_context`` and never mutated.
        """
        if self._closed:
            raise RuntimeError("router is closed")
        key = self.resolve_key(memory_key=memory_key, tool_context=tool_context)
        if key is None:
            self.stats.disabled_turns += 1
        return MemoryTurn(self, key, llm_context)

    async def flush(self, key: MemoryKey | None = None) -> None:
        """Wait for pending summaries of ``key`` (default: every held key) and save them.

        A key being evicted or closed meanwhile is not held any more: this waits for its
        final save to land (the eviction saves without waiting for summaries), and raises
        what that save raised.

        Raises what a save raises (:class:`PersistConflictError`, store errors).
        """
        if key is not None and not isinstance(key, MemoryKey):
            raise TypeError(f"key must be a MemoryKey or None, not {type(key).__name__}")
        if key is not None:
            composite = key.composite()
            slot = self._slots.get(composite)
            slots = [] if slot is None else [slot]
            retiring = [self._evicting[composite]] if composite in self._evicting else []
        else:
            slots = list(self._slots.values())
            retiring = list(self._evicting.values())
        for slot in [*slots, *(slot for slot, _ in retiring)]:
            slot.check_not_owner("flush")  # a retirement waits for the caller's turn too
        # In use from now on, all of them: none is evicted while this waits on another.
        for slot in slots:
            slot.users += 1
        try:
            for retiring_slot, _ in retiring:
                await self._retirement(retiring_slot)
            for slot in slots:
                await self._flush_and_save(slot)
                if slot.retired:  # an aclose() took it meanwhile: its retirement saves it
                    await self._retirement(slot)
        finally:
            for slot in slots:
                slot.users -= 1

    async def _retirement(self, slot: _Slot) -> None:
        """Wait for the retirement of ``slot`` to end; raise what its final save raised."""
        retiring = self._evicting.get(slot.composite)
        if retiring is not None and retiring[0] is slot:
            await retiring[1].wait()
        if slot.retire_error is not None:
            raise slot.retire_error

    async def aclose(self, *, flush: bool = True) -> None:
        """Flush (unless ``flush=False``), persist and close every memory. Idempotent.

        Waits for runs in progress. Every memory is closed even if a save fails; the
        first failure is raised afterwards.
        """
        # Those being retired too: another task's aclose may have taken the caller's slot
        # off the list, and its retirement waits for the caller's turn to end.
        for slot in [*self._slots.values(), *(slot for slot, _ in self._evicting.values())]:
            slot.check_not_owner("aclose")
        self._closed = True
        errors: list[BaseException] = []
        while self._slots or self._evicting:
            for _, event in list(self._evicting.values()):
                await event.wait()
            while self._slots:
                _, slot = self._slots.popitem(last=False)
                try:
                    await self._retire_apart(slot, flush=flush)
                except Exception as exc:
                    errors.append(exc)
        if errors:
            raise errors[0]

    async def __aenter__(self) -> MemoryRouter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- slots ---------------------------------------------------------------------------

    def _new_memory(self, key: MemoryKey) -> RoutedMemory:
        if self._factory is not None:
            return self._factory(key)
        return DefaultShortTermMemory(config=self._config, summarizer=self._summarizer, key=key)

    async def _checkout(self, key: MemoryKey) -> _Slot:
        """The slot of ``key``, locked and hydrated; loads it and evicts others if needed."""
        composite = key.composite()
        while (retiring := self._evicting.get(composite)) is not None:
            retiring[0].check_not_owner("a nested turn")  # it waits for the caller's turn
            await retiring[1].wait()  # its final save must land before we hydrate
        if self._closed:
            raise RuntimeError("router is closed")
        slot = self._slots.get(composite)
        if slot is not None:
            slot.check_not_owner("a nested turn")
        if slot is None:
            slot = _Slot(key, composite, self._new_memory(key), background=self._background)
            self._slots[composite] = slot
        else:
            self._slots.move_to_end(composite)
        slot.users += 1
        try:
            await self._evict_idle()
            await self._lock(slot)
            try:
                if slot.retired:
                    raise RuntimeError("router is closed")
                if not slot.hydrated:
                    await self._hydrate(slot.memory, slot)
                    slot.hydrated = True
                slot.owner = asyncio.current_task()
            except BaseException:
                slot.lock.release()
                raise
        except BaseException:
            slot.users -= 1
            raise
        return slot

    async def _checkin(self, slot: _Slot) -> None:
        slot.owner = None
        slot.lock.release()
        slot.users -= 1
        if len(self._slots) > self._max:
            await self._evict_idle()

    async def _lock(self, slot: _Slot) -> None:
        """Take the slot's lock, then wait out a save left in flight by a cancelled holder.

        Every holder settles first, so two saves of one memory never overlap.
        """
        await slot.lock.acquire()
        try:
            saving = slot.saving
            if saving is not None and not saving.done():
                await asyncio.wait([saving])  # never cancels the save, never raises its error
        except BaseException:
            slot.lock.release()
            raise

    @asynccontextmanager
    async def _locked(self, slot: _Slot) -> AsyncIterator[None]:
        await self._lock(slot)
        try:
            yield
        finally:
            slot.lock.release()

    async def _hydrate(self, memory: RoutedMemory, slot: _Slot) -> None:
        if self._store is not None:
            await memory.hydrate(self._store, slot.composite)
        slot.saved = _fingerprint(memory) if slot.background else ""
        self.stats.hydrations += 1

    async def _evict_idle(self) -> None:
        while len(self._slots) > self._max:
            victim = next((s for s in self._slots.values() if s.users == 0), None)
            if victim is None:
                return  # every held memory is in use; shrink when one is released
            del self._slots[victim.composite]
            try:
                await self._retire_apart(victim, flush=False)
                self.stats.evictions += 1
            except Exception:
                logger.exception("evicting memory %s failed", victim.composite)

    async def _retire_apart(self, slot: _Slot, *, flush: bool) -> None:
        """:meth:`_retire` an unlisted slot in a task of its own, which the caller's
        cancellation does not stop: a slot taken off the list is always retired (its tasks
        ended, its turns saved or counted lost, its memory closed), even when the eviction
        or ``aclose`` that took it is cancelled while it waits for a turn in progress.
        Until it is, the key is not loaded again and ``aclose`` waits for it."""
        event = asyncio.Event()
        self._evicting[slot.composite] = (slot, event)

        async def retire() -> None:
            try:
                await self._retire(slot, flush=flush)
            except Exception as exc:
                slot.retire_error = exc
                raise
            finally:
                del self._evicting[slot.composite]
                event.set()

        task = asyncio.get_running_loop().create_task(
            retire(), name=f"stm-retire:{slot.composite[:64]}"
        )
        # Its error reaches the caller; a cancelled caller's is logged by _retire itself
        # (turns lost) and otherwise only retrieved, as a save's (see ``_save``).
        task.add_done_callback(_retrieve)
        await asyncio.shield(task)

    async def _retire(self, slot: _Slot, *, flush: bool) -> None:
        """Stop background work, save if changed, close. The slot is already unlisted."""
        async with self._locked(slot):
            slot.retired = True
            flusher, slot.flusher = slot.flusher, None
            if flusher is not None and not flusher.done():
                flusher.cancel()
                await asyncio.gather(flusher, return_exceptions=True)
            try:
                if flush:
                    await slot.memory.flush()
                if slot.hydrated and slot.changed():
                    await self._save(slot)
            except Exception:
                if slot.unsaved:
                    self.stats.lost_turns += len(slot.unsaved)
                    logger.error(
                        "%d unsaved turn(s) of %s lost on close", len(slot.unsaved), slot.composite
                    )
                raise
            finally:
                await slot.memory.aclose()

    # -- turns and persistence -----------------------------------------------------------

    async def _record(self, slot: _Slot, turn: ConversationTurn, *, repeatable: bool) -> None:
        """Add a finished turn and persist it. The caller holds ``slot.lock``.

        ``repeatable``: the caller chose the turn's id, so it may be a retry of a turn
        already added; such a turn is not added again, only saved if it is not yet.
        """
        if repeatable and _is_held(turn, _stored_turn_ids(slot.memory)):
            self.stats.repeated_turns += 1
            if slot.changed():
                await self._save(slot)
            return
        try:
            await slot.memory.add_turn(turn)
        except BaseException:
            # A memory whose add_turn does I/O may have stored the turn before it failed or
            # was cancelled: the next save of the key writes whatever the memory holds.
            slot.saved = None
            raise
        slot.unsaved.append(turn)
        slot.generation += 1
        self.stats.turns_recorded += 1
        try:
            await self._save(slot)
        finally:
            if slot.background:
                self._schedule_flush(slot)

    async def _save(self, slot: _Slot) -> None:
        """Persist ``slot.memory`` without losing anyone's update. Caller holds the lock.

        The save runs as a task of its own, shielded from the caller's cancellation: a
        store may complete a write after its caller was cancelled (SQLite's runs on in a
        worker thread), and the revision and the unsaved turns must then still be
        accounted for, or the next save would re-apply turns that already landed.
        """
        if self._store is None:
            slot.unsaved.clear()
            return
        task = asyncio.get_running_loop().create_task(
            self._save_now(slot), name=f"stm-save:{slot.composite[:64]}"
        )
        slot.saving = task
        task.add_done_callback(_retrieve)
        try:
            await asyncio.shield(task)
        finally:
            if task.done() and slot.saving is task:
                slot.saving = None  # an idle slot keeps no finished task alive

    async def _save_now(self, slot: _Slot) -> None:
        """The save itself, with conflict handling.

        A stale save means another writer saved this key since we loaded it; its state
        contains everything we saved before, so a fresh hydrate plus our unsaved turns is
        the merge of both histories.
        """
        assert self._store is not None
        try:
            await self._save_attempts(slot, self._store)
        finally:
            if slot.retired:
                # Closed while we ran (a cancelled eviction or aclose): close whatever
                # memory a conflict swapped in, too. aclose is idempotent.
                await slot.memory.aclose()

    async def _save_attempts(self, slot: _Slot, store: StateStore) -> None:
        attempt = 0
        while True:
            # Taken right before persist, which snapshots the state before its first await;
            # the summarizer may change the memory while the write is in flight.
            fingerprint = slot.fingerprint()
            try:
                await _persist(slot.memory, store, slot.composite)
            except StaleStateError as exc:
                self.stats.conflicts += 1
                if attempt >= self._retries:
                    self.stats.conflict_failures += 1
                    raise PersistConflictError(
                        slot.composite,
                        attempts=attempt + 1,
                        expected=exc.expected,
                        actual=exc.actual,
                    ) from exc
                attempt += 1
                await asyncio.sleep(random.uniform(0, _CONFLICT_BACKOFF_S * attempt))
                await self._rehydrate(slot)
                continue
            slot.unsaved.clear()
            slot.saved = fingerprint
            self.stats.persists += 1
            return

    async def _rehydrate(self, slot: _Slot) -> None:
        """Swap in a memory freshly loaded from the store, with our unsaved turns on top."""
        fresh = self._new_memory(slot.key)
        kept: list[ConversationTurn] = []
        try:
            await self._hydrate(fresh, slot)
            # A save that landed although it raised (a store that wrote, then failed to
            # answer) left its turns in the store: they are not re-applied.
            stored = _stored_turn_ids(fresh)
            for turn in slot.unsaved:
                if _is_held(turn, stored):
                    self.stats.already_saved_turns += 1
                    continue
                try:
                    await fresh.add_turn(turn)
                except Exception as exc:  # e.g. MemoryBudgetExceeded on the merged state
                    self.stats.dropped_turns += 1
                    logger.warning(
                        "turn of %s dropped: cannot re-apply it after a conflict: %s: %s",
                        slot.composite,
                        type(exc).__name__,
                        exc,
                    )
                else:
                    kept.append(turn)
        except BaseException:
            await fresh.aclose()
            raise
        old, slot.memory = slot.memory, fresh
        slot.unsaved = kept
        slot.generation += 1
        await old.aclose()

    def _schedule_flush(self, slot: _Slot) -> None:
        if slot.retired or (slot.flusher is not None and not slot.flusher.done()):
            return  # a running flusher sees the new generation and goes round again
        task = asyncio.get_running_loop().create_task(
            self._flush_loop(slot), name=f"stm-flush:{slot.composite[:64]}"
        )
        slot.flusher = task
        task.add_done_callback(_log_task_failure)

    async def _flush_loop(self, slot: _Slot) -> None:
        """Save the key's summary once no turn has come for ``summary_save_delay_s``.

        While turns keep coming, each turn's save takes the summaries installed before it
        along: a summary saved alone between them would be one more commit per turn (with
        many keys, each turn comes about as often as the delay ends). The stored state
        then lacks at most the summaries made since the key's last turn, which the quiet
        spell after that turn saves."""
        while not slot.retired:
            generation = slot.generation
            await asyncio.sleep(self._summary_delay_s)
            if slot.generation != generation:
                continue  # a turn came meanwhile: wait for a quiet spell
            await self._flush_and_save(slot)
            if slot.generation == generation:
                return

    async def _flush_and_save(self, slot: _Slot) -> None:
        """Flush the slot's memory and save it if that changed anything."""
        while not slot.retired:
            memory = slot.memory
            await memory.flush()  # outside the lock: a slow summarizer must not block turns
            async with self._locked(slot):
                if slot.retired:
                    return
                if slot.memory is memory and slot.hydrated and slot.changed():
                    await self._save(slot)
                if slot.memory is memory:
                    return
            # A conflict swapped in a re-hydrated memory: flush that one too.


async def _persist(memory: RoutedMemory, store: StateStore, key: str) -> None:
    """``memory.persist``, from a save task of the router's, which nobody cancels: this
    package's memory then skips the shield (one more task) it needs for other callers."""
    if type(memory) is DefaultShortTermMemory:
        save = memory._persisting(store, key)
        if save is not None:
            await save
    else:
        await memory.persist(store, key)


#: What identifies a stored turn: its ``turn_id``, or for a turn stored without one (by a
#: memory that does not keep ids) its messages and the time ``finish`` stamped on it.
TurnId = str | tuple[str, str, float]


def _is_held(turn: ConversationTurn, stored: set[TurnId]) -> bool:
    """Whether ``turn`` is among the ``stored`` turns (:func:`_stored_turn_ids`)."""
    if turn.turn_id is not None and turn.turn_id in stored:
        return True
    return (turn.user_message, turn.assistant_response, float(turn.ts)) in stored


def _stored_turn_ids(memory: RoutedMemory) -> set[TurnId]:
    """The ids of the turns a memory keeps verbatim (recent, pending, backlog), and of the
    newest turns that left it (``departed_turn_ids``: summarized, or dropped); none for a
    memory without ``to_dict``."""
    to_dict = getattr(memory, "to_dict", None)
    if to_dict is None:
        return set()
    state = to_dict()
    held: set[TurnId] = {
        t.get("turn_id") or (t["user_message"], t["assistant_response"], float(t["ts"]))
        for part in ("turns", "pending", "backlog")
        for t in state.get(part, ())
    }
    held.update(state.get("departed_turn_ids", ()))
    return held


def _retrieve(task: asyncio.Task[None]) -> None:
    # A save's error reaches its caller through the shield; if the caller was cancelled
    # meanwhile, retrieve it here so it is not reported as "never retrieved".
    if not task.cancelled() and (exc := task.exception()) is not None:
        logger.debug("save failed: %s: %s", type(exc).__name__, exc)


def _log_task_failure(task: asyncio.Task[None]) -> None:
    # Retrieve the exception so it is logged once, never "never retrieved".
    if not task.cancelled() and (exc := task.exception()) is not None:
        logger.warning("background save failed: %s: %s", type(exc).__name__, exc)
