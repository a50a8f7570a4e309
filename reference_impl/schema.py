"""The persisted form of a memory (spec group SER): pydantic schema, dump, load, upgrade.

``load`` builds a complete new :class:`MemoryState` or raises ``ValueError``; the memory
swaps it in only on success, so a malformed input never half-loads (SER-003).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator

from . import watermark
from .budget import Budget
from .entries import Entry, MemoryState
from .health import HealthMachine
from .inputs import MAX_DEPTH, MAX_REVISION, MAX_TURN_ID, check_json, read_plain_turn
from .types import (
    ConversationTurn,
    MemoryHealth,
    MemoryKey,
    ShortTermMemoryConfig,
    TrajectoryDigest,
)

logger = logging.getLogger("reference_impl.memory")

__all__ = [
    "STATE_VERSION",
    "KeyMismatchError",
    "MemoryStateV2",
    "config_snapshot",
    "dump",
    "dump_reusing",
    "dump_turn",
    "load",
    "load_steps",
    "run_steps",
    "turn_lists",
]

STATE_VERSION = 2
SPEC_VERSION = "1.5.0"
#: How deep a state nests above a turn's artifacts (state, its turn list, the turn, the
#: artifacts mapping), with room for the configuration snapshot.
_STATE_NESTING = 8
#: Turns validated, or rebuilt, in one step of :func:`load_steps`: a few milliseconds.
STEP_TURNS = 128
_TURN_LISTS = ("turns", "pending", "backlog")

#: A load done in steps: ``next()`` does one step; the value is what it returns.
Steps = Generator[None, None, "MemoryState"]

HealthName = Literal["healthy", "retry", "degraded", "recovering"]
StrategyName = Literal["truncation", "rolling_summary", "none"]


class KeyMismatchError(ValueError):
    """The state belongs to another :class:`MemoryKey` (KEY-007)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class DigestV2(_Strict):
    tools_invoked: list[str]
    observations_summary: str
    reasoning_summary: str | None = None
    artifacts_refs: list[str] = Field(default_factory=list)


class TurnV2(_Strict):
    seq: int = Field(ge=1)
    user_message: str
    assistant_response: str
    trajectory_digest: DigestV2 | None = None
    artifacts_shown: dict[str, JsonValue] = Field(default_factory=dict)
    artifacts_hidden_refs: list[str] = Field(default_factory=list)
    ts: float = Field(default=0.0, strict=False, allow_inf_nan=False)
    turn_id: str | None = Field(default=None, min_length=1, max_length=MAX_TURN_ID)

    @field_validator("artifacts_shown")
    @classmethod
    def _plain_artifacts(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        check_json(value, "artifacts_shown")  # the limits add_turn applies
        return value


class KeyV2(_Strict):
    tenant_id: str
    user_id: str
    session_id: str


class MemoryStateV2(_Strict):
    """Version 2 of the memory state; published as ``docs/memory-state.schema.json``."""

    version: Literal[2]
    spec_version: str
    key: KeyV2 | None = None
    storage_key: str | None = None
    strategy: StrategyName
    health: HealthName
    failures: int = Field(ge=0)
    summary: str
    summarized_through: int = Field(ge=0)
    next_seq: int = Field(ge=1)
    turns: list[TurnV2]
    pending: list[TurnV2]
    backlog: list[TurnV2]
    dropped_turns: int = Field(ge=0)
    revision: int = Field(ge=0, le=MAX_REVISION)
    config_snapshot: dict[str, JsonValue] = Field(default_factory=dict)
    #: Ids of the newest turns that left the memory (``MemoryState.departed``); written
    #: only when there are any.
    departed_turn_ids: list[Annotated[str, Field(min_length=1, max_length=MAX_TURN_ID)]] = Field(
        default_factory=list
    )


# -- v1 (PenguiFlow) -----------------------------------------------------------------


class _LaxTurnV1(BaseModel):
    model_config = ConfigDict(extra="ignore")

    user_message: str = ""
    assistant_response: str = ""
    trajectory_digest: DigestV2 | None = None
    artifacts_shown: dict[str, JsonValue] = Field(default_factory=dict)
    artifacts_hidden_refs: list[str] = Field(default_factory=list)
    ts: float = Field(default=0.0, allow_inf_nan=False)


class _StateV1(BaseModel):
    model_config = ConfigDict(extra="ignore")

    version: Literal[1]
    health: HealthName
    summary: str = ""
    turns: list[_LaxTurnV1] = Field(default_factory=list)
    pending: list[_LaxTurnV1] = Field(default_factory=list)
    backlog: list[_LaxTurnV1] = Field(default_factory=list)
    config_snapshot: dict[str, JsonValue] = Field(default_factory=dict)


def _upgrade_v1(data: Mapping[str, Any]) -> MemoryStateV2:
    """PenguiFlow's v1 has no sequence numbers: number the turns oldest first."""
    old = _StateV1.model_validate(dict(data))
    seq = 0

    def number(turns: list[_LaxTurnV1]) -> list[TurnV2]:
        nonlocal seq
        out = []
        for t in turns:
            seq += 1
            out.append(TurnV2(seq=seq, **t.model_dump()))
        return out

    backlog, pending, turns = number(old.backlog), number(old.pending), number(old.turns)
    strategy = old.config_snapshot.get("strategy")
    return MemoryStateV2(
        version=2,
        spec_version=SPEC_VERSION,
        strategy=strategy if isinstance(strategy, str) else "rolling_summary",  # type: ignore[arg-type]
        health=old.health,
        failures=1 if old.health == "retry" else 0,
        summary=old.summary,
        summarized_through=0,
        next_seq=seq + 1,
        turns=turns,
        pending=pending,
        backlog=backlog,
        dropped_turns=0,
        revision=0,
        config_snapshot=old.config_snapshot,
    )


# -- dump ----------------------------------------------------------------------------


def dump_turn(entry: Entry) -> dict[str, Any]:
    turn = entry.turn
    digest = turn.trajectory_digest
    dumped = {
        "seq": entry.seq,
        "user_message": turn.user_message,
        "assistant_response": turn.assistant_response,
        "trajectory_digest": None
        if digest is None
        else {
            "tools_invoked": list(digest.tools_invoked),
            "observations_summary": digest.observations_summary,
            "reasoning_summary": digest.reasoning_summary,
            "artifacts_refs": list(digest.artifacts_refs),
        },
        "artifacts_shown": dict(turn.artifacts_shown),
        "artifacts_hidden_refs": list(turn.artifacts_hidden_refs),
        "ts": turn.ts,
    }
    if turn.turn_id is not None:  # left out otherwise: states without ids stay as they were
        dumped["turn_id"] = turn.turn_id
    return dumped


def config_snapshot(config: ShortTermMemoryConfig) -> dict[str, Any]:
    budget, isolation = config.budget, config.isolation
    return {
        "strategy": config.strategy,
        "budget": {
            "full_zone_turns": budget.full_zone_turns,
            "summary_max_tokens": budget.summary_max_tokens,
            "total_max_tokens": budget.total_max_tokens,
            "overflow_policy": budget.overflow_policy,
        },
        "isolation": {
            "tenant_key": isolation.tenant_key,
            "user_key": isolation.user_key,
            "session_key": isolation.session_key,
            "require_explicit_key": isolation.require_explicit_key,
        },
        "summarizer_model": config.summarizer_model,
        "include_trajectory_digest": config.include_trajectory_digest,
        "recovery_backlog_limit": config.recovery_backlog_limit,
        "retry_attempts": config.retry_attempts,
    }


def dump(state: MemoryState, config: ShortTermMemoryConfig) -> dict[str, Any]:
    """The versioned, JSON-serialisable form of ``state`` (``to_dict``)."""
    data = _dump_head(state, config)
    for name, entries in turn_lists(state):
        data[name] = [dump_turn(e) for e in entries]
    return data


#: A turn's stored form by seq, with the entry it was made from (see :func:`dump_reusing`).
Records = dict[int, tuple[Entry, dict[str, Any]]]


def dump_reusing(
    state: MemoryState, config: ShortTermMemoryConfig, previous: Records
) -> tuple[dict[str, Any], Records]:
    """:func:`dump`, reusing the turn dicts of ``previous`` for the entries it was made
    from (entries never change), and the records to pass next time. For a reader that
    does not change what it is given: each persist costs a lookup per turn, not a copy."""
    data = _dump_head(state, config)
    records: Records = {}
    for name, entries in turn_lists(state):
        turns = data[name] = []
        for entry in entries:
            record = previous.get(entry.seq)
            if record is None or record[0] is not entry:
                record = (entry, dump_turn(entry))
            records[entry.seq] = record
            turns.append(record[1])
    return data, records


def turn_lists(state: MemoryState) -> tuple[tuple[str, Iterable[Entry]], ...]:
    return (("turns", state.recent), ("pending", state.pending), ("backlog", state.backlog))


def _dump_head(state: MemoryState, config: ShortTermMemoryConfig) -> dict[str, Any]:
    """Every field of :func:`dump` but the lists of turns."""
    head: dict[str, Any] = {
        "version": STATE_VERSION,
        "spec_version": SPEC_VERSION,
        "key": None if state.key is None else state.key.as_dict(),
        "storage_key": None,
        "strategy": config.strategy,
        "health": state.health.state.value,
        "failures": state.health.failures,
        "summary": state.summary,
        "summarized_through": state.summarized_through,
        "next_seq": state.next_seq,
        "dropped_turns": state.dropped_turns,
        "revision": state.revision,
        "config_snapshot": config_snapshot(config),
    }
    if state.departed:  # left out otherwise: states without ids stay as they were
        head["departed_turn_ids"] = list(state.departed)
    return head


# -- load ----------------------------------------------------------------------------


#: A turn as loaded: its sequence number and the turn.
Loaded = tuple[int, ConversationTurn]
#: Makes the entry of a loaded turn (``Entry.make`` with the loading memory's settings).
MakeEntry = Callable[[int, ConversationTurn], Entry]


def _read_turn(raw: Any, where: str) -> Loaded:
    """The turn ``raw`` holds, as the model reads it (any shape), or ``ValueError``."""
    _check_plain(raw, where, 2)
    try:
        return _from_model(TurnV2.model_validate(raw))
    except ValidationError as exc:
        raise ValueError(f"invalid memory state (version 2): {where}: {exc}") from None


def _from_model(turn: TurnV2) -> Loaded:
    digest = turn.trajectory_digest
    return turn.seq, ConversationTurn(
        user_message=turn.user_message,
        assistant_response=turn.assistant_response,
        trajectory_digest=None
        if digest is None
        else TrajectoryDigest(
            tools_invoked=list(digest.tools_invoked),
            observations_summary=digest.observations_summary,
            reasoning_summary=digest.reasoning_summary,
            artifacts_refs=list(digest.artifacts_refs),
        ),
        artifacts_shown=dict(turn.artifacts_shown),
        artifacts_hidden_refs=list(turn.artifacts_hidden_refs),
        ts=turn.ts,
        turn_id=turn.turn_id,
    )


Parsed = tuple[MemoryStateV2, dict[str, list[Entry]]]


def _parse(data: Any, make: MakeEntry) -> Generator[None, None, Parsed]:
    """Validate ``data``, a step per :data:`STEP_TURNS` turns of version 2: the state
    (whose own lists of turns are not read) and the entries of its lists of turns, by
    name."""
    if not isinstance(data, Mapping):
        raise ValueError(f"memory state must be a mapping, got {type(data).__name__}")
    version = data.get("version")
    if type(version) is not int:  # not a bool either: True == 1 would read as version 1
        raise ValueError(f"memory state version must be an int, got {version!r}")
    if version == 1:  # PenguiFlow's format, validated in one step
        _check_plain(dict(data), "state", 0)
        try:
            upgraded = _upgrade_v1(data)
        except ValidationError as exc:
            raise ValueError(f"invalid memory state (version 1): {exc}") from None
        converted: dict[str, list[Entry]] = {}
        for name in _TURN_LISTS:
            entries = converted[name] = []
            for index, turn in enumerate(getattr(upgraded, name), 1):
                entries.append(make(*_from_model(turn)))
                if index % STEP_TURNS == 0:
                    yield
        return upgraded, converted
    if version != STATE_VERSION:
        raise ValueError(f"unsupported memory state version: {version!r}")
    data = dict(data)
    lists: dict[str, list[Any]] = {}
    for name in _TURN_LISTS:
        value = data.pop(name, None)
        if not isinstance(value, list):
            raise ValueError(
                f"invalid memory state (version 2): {name!r} must be a list of turns,"
                f" got {type(value).__name__}"
            )
        lists[name] = value
    _check_plain(data, "state", 0)
    try:
        head = MemoryStateV2.model_validate({**data, "turns": [], "pending": [], "backlog": []})
    except ValidationError as exc:
        raise ValueError(f"invalid memory state (version 2): {exc}") from None
    parsed: dict[str, list[Entry]] = {}
    for name, raw in lists.items():
        entries = parsed[name] = []
        for start in range(0, len(raw), STEP_TURNS):
            for index in range(start, min(start + STEP_TURNS, len(raw))):
                loaded = read_plain_turn(raw[index])  # the common shape, without the model
                if loaded is None:
                    loaded = _read_turn(raw[index], f"state.{name}[{index}]")
                entries.append(make(*loaded))
            yield
    return head, parsed


def _check_plain(value: Any, where: str, depth: int) -> None:
    """Every string valid Unicode, every number finite, nesting bounded: what add_turn
    accepts, and nothing a store could not write back. ``depth``: where ``value`` is."""
    try:
        check_json(value, where, max_depth=MAX_DEPTH + _STATE_NESTING - depth)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def _check_order(model: MemoryStateV2, entries: dict[str, list[Entry]]) -> None:
    seqs = [e.seq for name in ("backlog", "pending", "turns") for e in entries[name]]
    if any(b <= a for a, b in itertools.pairwise(seqs)):
        raise ValueError("turn sequence numbers must increase: backlog, pending, then turns")
    if seqs and seqs[0] <= model.summarized_through:
        raise ValueError("a retained turn is at or below the summarized_through watermark")
    if seqs and model.next_seq <= seqs[-1]:
        raise ValueError("next_seq must exceed every turn's sequence number")
    if model.summarized_through >= model.next_seq:
        # New turns would be numbered at or below the watermark and count as covered.
        raise ValueError("summarized_through must be below next_seq")


def load(
    data: Any,
    config: ShortTermMemoryConfig,
    budget: Budget,
    key: MemoryKey | None,
    *,
    shared: bool = False,
) -> MemoryState:
    """Build a fresh state from ``data`` for a memory of ``config`` or raise ``ValueError``
    (:class:`KeyMismatchError` for another key's state), whatever ``data`` is.

    ``shared``: ``data`` is the state instances of one key share, written by one of them.
    A token estimator raising on its whole view then leaves it as written (logged; the
    next turn trims it), as the memory that wrote it did: refusing it would refuse the
    key's only state to every instance.
    """
    return run_steps(load_steps(data, config, budget, key, shared=shared))


def run_steps(steps: Steps) -> MemoryState:
    """Do every step of a load at once; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def load_steps(
    data: Any,
    config: ShortTermMemoryConfig,
    budget: Budget,
    key: MemoryKey | None,
    *,
    shared: bool = False,
) -> Steps:
    """:func:`load` in steps of at most :data:`STEP_TURNS` turns, so that an asynchronous
    caller can let other tasks run between them (``afrom_dict``). Nothing is changed
    until the last step returns the new state."""
    try:
        return (yield from _load_steps(data, config, budget, key, shared))
    except ValueError:
        raise
    except Exception as exc:  # anything else a hostile mapping can raise
        raise ValueError(f"invalid memory state: {type(exc).__name__}: {exc}") from None


def _check_strategy(model: MemoryStateV2, entries: dict[str, list[Entry]]) -> None:
    """Refuse what a memory of the state's strategy never holds (SER-003): without a
    summarizer (``none``, ``truncation``) nothing ever leaves HEALTHY, nor makes a summary
    or a pending turn. Loaded, a DEGRADED truncation memory would report it forever, with
    no summarizer to recover, and turns no view shows would be carried from save to save."""
    if model.strategy == "rolling_summary":
        return
    found = [
        f"health {model.health!r}" if model.health != "healthy" else "",
        f"failed calls ({model.failures})" if model.failures else "",
        "a summary" if model.summary else "",
        *(f"{name} turns" for name in ("pending", "backlog") if entries[name]),
        "turns" if model.strategy == "none" and entries["turns"] else "",
    ]
    if any(found):
        raise ValueError(
            f"invalid memory state: a {model.strategy!r} memory never holds "
            + ", ".join(what for what in found if what)
        )


def _check_failures(model: MemoryStateV2) -> None:
    """A memory counts failed calls from the first failure to the next success: HEALTHY
    counts none, RETRY at least one. Loaded otherwise, a HEALTHY memory's first failure
    would count as its last retry and skip RETRY (HLT-002)."""
    if model.health == "healthy" and model.failures:
        raise ValueError(
            f"invalid memory state: a healthy memory counts no failed calls, not {model.failures}"
        )
    if model.health == "retry" and not model.failures:
        raise ValueError("invalid memory state: a memory in retry counts its failed calls (0)")


def _load_steps(
    data: Any, config: ShortTermMemoryConfig, budget: Budget, key: MemoryKey | None, shared: bool
) -> Steps:
    include, size_of = config.include_trajectory_digest, budget.meter.size_of

    def make(seq: int, turn: ConversationTurn) -> Entry:
        return Entry.make(seq, turn, include_digest=include, size_of=size_of)

    model, entries = yield from _parse(data, make)
    if model.strategy != config.strategy:
        raise ValueError(
            f"state was written by a {model.strategy!r} memory; this one is {config.strategy!r}"
        )
    _check_order(model, entries)
    _check_strategy(model, entries)
    _check_failures(model)
    if model.key is not None:
        stored = MemoryKey(**model.key.model_dump())
        if key is not None and stored != key:
            raise KeyMismatchError(
                f"state belongs to key {stored.composite()!r}, not {key.composite()!r}"
            )
        key = stored

    health = HealthMachine(
        config.retry_attempts, config.retry_backoff_base_s, config.degraded_retry_interval_s
    )
    health.state = MemoryHealth(model.health)
    health.failures = model.failures
    state = MemoryState(
        health=health,
        key=key,
        next_seq=model.next_seq,
        summarized_through=model.summarized_through,
        dropped_turns=model.dropped_turns,
        revision=model.revision,
    )
    state.departed.extend(model.departed_turn_ids)  # the newest DEPARTED_IDS of them
    for entry in entries["turns"]:
        state.push_recent(entry)
    state.pending = entries["pending"]
    state.backlog.extend(entries["backlog"])
    # Normalise what an older writer or another configuration may have left.
    if health.degraded:
        watermark.degrade(state, config)
    elif state.backlog:
        state.pending = [*state.backlog, *state.pending]
        state.backlog.clear()
    while len(state.recent) > config.budget.full_zone_turns:
        watermark.evict_oldest_recent(state, config)

    summary = model.summary
    if not budget.summary_fits(summary):
        if config.budget.overflow_policy == "error":
            raise ValueError("stored summary exceeds summary_max_tokens")
        summary = budget.clip_summary(summary)
    state.set_summary(summary)
    try:
        budget.settle(state)
    except Exception:
        if not shared:
            raise
        logger.exception("token_estimator raised bringing a shared state within budget")
        return state
    if config.budget.overflow_policy == "error" and not budget.fits(state):
        raise ValueError("stored state exceeds total_max_tokens under overflow_policy='error'")
    return state
