"""SER — serialization round trips, malformed input, PenguiFlow v1 states, persistence."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stm_conformance import ScriptedSummarizer
from stm_conformance._deadline import MemoryMark, noting_callers
from stm_conformance.checks import (
    EITHER_STRATEGY,
    config,
    eventually,
    json_state,
    memory_view,
    patient,
    returns_within,
    state_text,
    turn,
    users,
    view_tokens,
)
from stm_conformance.contract import (
    ConversationTurn,
    MemoryBudget,
    MemoryKey,
    ShortTermMemoryConfig,
    default_token_estimator,
)
from stm_conformance.fixtures import CheckedMemory, PreconditionError
from stm_conformance.store import ConditionalKitStateStore, KitStaleStateError

req = pytest.mark.stm_requirement
scenario = pytest.mark.stm_scenario
cap = pytest.mark.stm_capability
pytestmark = [cap("serialization")]

FIXTURE_SETTINGS = settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    deadline=None,
)

OPS = st.lists(st.sampled_from(["add", "add_big", "flush", "fail", "hold", "release"]), max_size=14)


async def _observe(memory: Any) -> tuple[str, str, int]:
    view = json.dumps(dict(await memory.get_llm_context()), sort_keys=True)
    return view, memory.health.value, memory.estimate_tokens()


async def _assert_observed_as(memory: Any, expected: tuple[str, str, int], what: str) -> None:
    """``memory`` (just loaded) shows the view, health and estimate ``expected``. When
    only the estimate differs, and it is not the configured estimator's count of the very
    view shown, while the expected one was, the count went stale across the load: that is
    BUD-008's failure, not the load's."""
    observed = await _observe(memory)
    if observed == expected:
        return
    cfg = getattr(memory, "_stm_config", None)
    if observed[:2] == expected[:2] and isinstance(cfg, ShortTermMemoryConfig):
        measured = view_tokens(cfg, json.loads(observed[0]))
        if observed[2] != measured and expected[2] == measured:
            raise AssertionError(
                f"BUD-008: estimate_tokens()={observed[2]} after the load, but the configured "
                f"estimator counts {measured} tokens in the view it shows ({what})"
            )
    raise AssertionError(f"{what}: observed {observed}, expected {expected}")


async def _drive(memory: Any, summarizer: ScriptedSummarizer, ops: list[str]) -> None:
    for n, op in enumerate(ops):
        if op == "add":
            await memory.add_turn(turn(n))
        elif op == "add_big":
            await memory.add_turn(turn(n, pad=40, digest=True))
        elif op == "flush":
            summarizer.release()
            await memory.flush()
        elif op == "fail":
            summarizer.fail_next(1, mode="raise")
        elif op == "hold":
            summarizer.hold()
        else:
            summarizer.release()


@req("SER-001")
@pytest.mark.stm_capability("rolling_summary")
async def test_to_dict_is_versioned_json(make_memory, scripted_summarizer):
    """JSON as it is, with no help from ``json.dumps``: also once turns that name
    themselves (``turn_id``) have been covered by a summary, failed a call and left, and
    of a DEGRADED memory. A state labelled version 2 has the fields of that format and no
    other."""
    memory = await make_memory(config(full_zone_turns=1), summarizer=scripted_summarizer)
    await memory.add_turn(turn(1, digest=True))
    await memory.add_turn(turn(2))
    await memory.flush()
    states = {"after a summary": memory.to_dict()}
    scripted_summarizer.fail_next(1, mode="raise")
    for i in range(3, 7):
        named = dataclasses.replace(turn(i, digest=i % 2 == 0), turn_id=f"turn-{i}-ü")
        await memory.add_turn(named)
    states["after a failed call, with turn ids"] = memory.to_dict()
    await memory.flush()
    states["once the named turns are summarized"] = memory.to_dict()
    # A DEGRADED memory holds what the others do not: a backlog, dropped turns.
    failing = ScriptedSummarizer()
    failing.fail_always("raise")
    cfg = config(full_zone_turns=1, retry_attempts=0, recovery_backlog_limit=1)
    degraded = await make_memory(cfg, summarizer=failing)
    for i in range(4):
        await degraded.add_turn(turn(i))
    await eventually(
        lambda: degraded.health.value == "degraded", what="HLT-004: DEGRADED (precondition)"
    )
    states["degraded, with a backlog and dropped turns"] = degraded.to_dict()
    for when, state in states.items():
        try:
            text = json.dumps(state, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise AssertionError(f"SER-001: to_dict() {when} is not JSON: {exc}") from exc
        loaded = json.loads(text)
        assert isinstance(loaded.get("version"), int), (
            f"SER-001: to_dict() {when} has no int version"
        )
        if type(loaded["version"]) is int and loaded["version"] == 2:
            problems = v2_format_problems(loaded)
            assert not problems, (
                f"SER-001: to_dict() {when} is labelled version 2 but is not that format "
                f"(docs/memory-state.schema.json; a format that gains a field is a new "
                f"version): {'; '.join(problems)}"
            )


@req("SER-002")
@FIXTURE_SETTINGS
@given(
    ops=OPS,
    strategy=st.sampled_from(["truncation", "rolling_summary"]),
    total=st.sampled_from([0, 80, 400]),
    window=st.integers(0, 3),
)
async def test_round_trip_is_observably_identical(
    stm_provider, stm_capabilities, ops, strategy, total, window
):
    if strategy not in stm_capabilities:
        return
    cfg = config(
        strategy,
        full_zone_turns=window,
        total_max_tokens=total,
        summary_max_tokens=min(total, 60) if total else 60,
        retry_backoff_base_s=0.001,
    )
    key = MemoryKey("t", "u", "round-trip")
    source_summarizer, clone_summarizer = ScriptedSummarizer(max_chars=150), ScriptedSummarizer()
    async with _source_and_clone(stm_provider, cfg, key, source_summarizer, clone_summarizer) as (
        source,
        clone,
    ):
        await _drive(source, source_summarizer, ops)
        source_summarizer.hold()
        clone_summarizer.hold()
        # Observed, then serialized with no await in between: a call still running when
        # the summarizer was held may land while a backend awaits I/O to read its view.
        expected = await _observe(source)
        state = json_state(source)
        clone.from_dict(state)
        await _assert_observed_as(clone, expected, f"round trip differs after {ops}")


@asynccontextmanager
async def _source_and_clone(
    stm_provider: Any,
    cfg: ShortTermMemoryConfig,
    key: MemoryKey,
    source_summarizer: ScriptedSummarizer,
    clone_summarizer: ScriptedSummarizer,
) -> AsyncIterator[tuple[CheckedMemory, CheckedMemory]]:
    """Two memories of ``cfg`` and ``key``, one per summarizer; released and disposed of
    after. Made here, not by make_memory (one per hypothesis example), but checked the
    same way: a flush stuck on a retry that never comes is blamed on HLT-002 within
    seconds."""
    summarizers = (source_summarizer, clone_summarizer)
    made = [await stm_provider.create(cfg, key, noting_callers(s)) for s in summarizers]
    marks = (MemoryMark(), MemoryMark())
    try:
        yield (
            CheckedMemory(made[0], cfg, source_summarizer, mark=marks[0]),
            CheckedMemory(made[1], cfg, clone_summarizer, mark=marks[1]),
        )
    finally:
        for summarizer in summarizers:
            summarizer.release()
        for memory, mark in zip(made, marks, strict=True):
            mark.closed = True
            await stm_provider.dispose(memory)


#: Turns of the long round trip: more than any one step of a backend's load, if it loads
#: in steps, and more than the recent window of any usual configuration.
LONG_CONVERSATION = 300


@scenario("text:non_ascii", "window:many")
@req("SER-002")
@pytest.mark.parametrize("strategy", EITHER_STRATEGY)
async def test_round_trip_of_a_long_conversation_is_observably_identical(stm_provider, strategy):
    """Hundreds of turns, all in the view: every recent turn (``truncation`` with a window
    as long as the conversation) or every pending turn (``rolling_summary``, the summarizer
    held), each turn told apart by its number and carrying non-ASCII text."""
    window = LONG_CONVERSATION if strategy == "truncation" else 2
    cfg = config(strategy, full_zone_turns=window, total_max_tokens=0)
    key = MemoryKey("t", "u", "long-round-trip")
    summarizers = ScriptedSummarizer(), ScriptedSummarizer()
    for summarizer in summarizers:
        summarizer.hold()
    async with _source_and_clone(stm_provider, cfg, key, *summarizers) as (source, clone):
        for n in range(LONG_CONVERSATION):
            await source.add_turn(ConversationTurn(f"ü{n}·" + "x" * (n % 7), f"答{n}"))
        expected = await _observe(source)
        clone.from_dict(json_state(source))
        observed = await _observe(clone)
        assert observed == expected, (
            f"after from_dict(to_dict()) of {LONG_CONVERSATION} turns the view, health or "
            f"estimate differs: {len(observed[0])} characters of view, {len(expected[0])} before"
        )


# Any character but a surrogate, as hypothesis' default alphabet, but from its table of
# categories: the default (``codec="utf-8"``) tries every code point once per directory
# it runs from, some 3 CPU-seconds of a run from a new one.
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)


def _mutations(valid: dict[str, Any]) -> st.SearchStrategy[Any]:
    keys = sorted(valid)
    drop = st.sampled_from(keys).map(lambda k: {x: v for x, v in valid.items() if x != k})
    retype = st.tuples(st.sampled_from(keys), JSON).map(lambda kv: {**valid, kv[0]: kv[1]})
    bad_turn = JSON.map(lambda junk: {**valid, "turns": [junk]})
    return JSON | drop | retype | bad_turn


#: Fields no turn can do without (``ConversationTurn``'s), whatever the format around them.
TURN_FIELDS = ("user_message", "assistant_response")
#: What version 2 of the state requires (``docs/memory-state.schema.json``): of the state,
#: of each turn record, of a turn's digest, of the key.
V2_STATE_FIELDS = (
    "version",
    "spec_version",
    "strategy",
    "health",
    "failures",
    "summary",
    "summarized_through",
    "next_seq",
    "turns",
    "pending",
    "backlog",
    "dropped_turns",
    "revision",
)
V2_TURN_FIELDS = ("seq", *TURN_FIELDS)
V2_DIGEST_FIELDS = ("tools_invoked", "observations_summary")
V2_KEY_FIELDS = ("tenant_id", "user_id", "session_id")
#: What else version 2 defines, of the same objects (the schema allows no other field).
V2_STATE_OPTIONAL = ("config_snapshot", "departed_turn_ids", "key", "storage_key")
V2_TURN_OPTIONAL = (
    "artifacts_hidden_refs",
    "artifacts_shown",
    "trajectory_digest",
    "ts",
    "turn_id",
)
V2_DIGEST_OPTIONAL = ("artifacts_refs", "reasoning_summary")


def v2_format_problems(state: Mapping[str, Any]) -> list[str]:
    """Where a state labelled version 2 leaves that format's fields: one it does not
    define, or one it requires missing (of the state, its key, each turn record and
    digest). Types and values are left to the loader's checks (SER-003)."""
    problems: list[str] = []

    def check(where: str, obj: Any, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
        if not isinstance(obj, Mapping):
            return
        problems.extend(f"{where} lacks {name!r}" for name in required if name not in obj)
        problems.extend(
            f"{where} has {name!r}, which version 2 does not define"
            for name in sorted(set(obj) - {*required, *optional}, key=repr)
        )

    check("the state", state, V2_STATE_FIELDS, V2_STATE_OPTIONAL)
    if state.get("key") is not None:
        check("its key", state["key"], V2_KEY_FIELDS, ())
    for name in ("backlog", "pending", "turns"):
        records = state.get(name)
        for i, record in enumerate(records if isinstance(records, list) else []):
            check(f"{name}[{i}]", record, V2_TURN_FIELDS, V2_TURN_OPTIONAL)
            digest = record.get("trajectory_digest") if isinstance(record, Mapping) else None
            if digest is not None:
                where = f"{name}[{i}].trajectory_digest"
                check(where, digest, V2_DIGEST_FIELDS, V2_DIGEST_OPTIONAL)
    return problems


def _assert_refused(memory: Any, state: Any, what: str, why: str = "") -> None:
    """``from_dict`` of ``state`` (a state ``what``) raises ``ValueError``, nothing else."""
    try:
        memory.from_dict(state)
    except ValueError:
        return
    except Exception as exc:
        raise AssertionError(
            f"SER-003: from_dict of a state {what} raised {type(exc).__name__}, not ValueError"
        ) from exc
    raise AssertionError(f"SER-003: from_dict accepted a state {what}{why}")


def _without_required_fields(valid: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(where, copy of valid without the field there)`` for each field ``valid`` cannot do
    without: those of ``TURN_FIELDS`` in the first turn record (a mapping holding both) of
    each list; in a version-2 state, every field that format requires of the state, of its
    key, of the first turn record of each list and of the first digest there."""
    v2 = valid.get("version") == 2

    def without(*path: str | int) -> tuple[str, dict[str, Any]]:
        data = json.loads(json.dumps(valid))
        record = data
        for step in path[:-1]:
            record = record[step]
        del record[path[-1]]
        return "state" + "".join(f"[{step!r}]" for step in path), data

    def fields(record: Any, required: tuple[str, ...]) -> list[str]:
        return [f for f in required if f in record] if isinstance(record, dict) else []

    found = [without(f) for f in fields(valid, V2_STATE_FIELDS if v2 else ())]
    found += [without("key", f) for f in fields(valid.get("key"), V2_KEY_FIELDS if v2 else ())]
    for name, records in valid.items():
        turns = [
            i
            for i, record in enumerate(records if isinstance(records, list) else [])
            if len(fields(record, TURN_FIELDS)) == len(TURN_FIELDS)
        ]
        if not turns:
            continue
        required = V2_TURN_FIELDS if v2 else TURN_FIELDS
        found += [without(name, turns[0], f) for f in fields(records[turns[0]], required)]
        for i in turns:
            digest = records[i].get("trajectory_digest")
            if v2 and isinstance(digest, dict):
                found += [
                    without(name, i, "trajectory_digest", f)
                    for f in fields(digest, V2_DIGEST_FIELDS)
                ]
                break
    return found


@scenario("direction:accept", "direction:reject")
@req("SER-003")
@pytest.mark.stm_capability("rolling_summary")
async def test_malformed_input_raises_value_error_and_changes_nothing(
    make_memory, scripted_summarizer
):
    memory = await make_memory(config(full_zone_turns=1), summarizer=scripted_summarizer)
    for i in range(3):
        await memory.add_turn(turn(i, digest=True))
    await memory.flush()
    scripted_summarizer.hold()
    valid = memory.to_dict()
    before = await _observe(memory)
    before_state = json.dumps(valid, sort_keys=True)

    @FIXTURE_SETTINGS
    @given(data=_mutations(valid))
    def attempt(data: Any) -> None:
        try:
            memory.from_dict(data)
        except ValueError:
            return
        except Exception as exc:  # the requirement: ValueError and nothing else
            raise AssertionError(f"from_dict raised {type(exc).__name__}, not ValueError") from exc
        # Taken for a valid variant (a dropped optional field, a retyped value of the
        # right type): malformed ones it must refuse are tried one by one below.
        memory.from_dict(json.loads(before_state))

    attempt()
    assert await _observe(memory) == before, "a refused from_dict changed the memory"
    assert state_text(memory) == before_state, "a refused from_dict changed to_dict()"
    # Fields a half-load could apply before failing on another field.
    numbers = [k for k, v in valid.items() if isinstance(v, int) and not isinstance(v, bool)]
    for field in numbers:
        await anyio.lowlevel.checkpoint()  # let the loop answer the watchdog
        for other in sorted(set(valid) - {field}):
            try:
                memory.from_dict({**valid, field: valid[field] + 1, other: object()})
            except ValueError:
                continue
            memory.from_dict(json.loads(before_state))
    assert state_text(memory) == before_state, "a refused from_dict changed to_dict()"
    for junk in ([], "state", None, {"version": 999}, {"version": True}):
        with pytest.raises(ValueError):
            memory.from_dict(junk)  # type: ignore[arg-type]
    assert await _observe(memory) == before
    # Required fields, one at a time, nested ones too: a turn record without its answer is
    # malformed, not a turn with an empty answer.
    for where, data in _without_required_fields(valid):
        await anyio.lowlevel.checkpoint()
        _assert_refused(memory, data, f"without {where}")
    assert await _observe(memory) == before, "a refused from_dict changed the memory"
    assert state_text(memory) == before_state, "a refused from_dict changed to_dict()"


@scenario("direction:reject")
@req("SER-003")
@cap("truncation")
async def test_a_number_given_as_another_type_is_refused(make_memory):
    """Every integer the memory's own ``to_dict()`` writes, in the state or in its first
    turn record, given back as text, as a float or as a bool, is malformed: coercing it
    would load a record a store or a hand corrupted, and ``True`` would pass for 1. Each
    is refused, the memory unchanged."""
    memory = await make_memory(config("truncation", full_zone_turns=2))
    for i in range(3):
        await memory.add_turn(turn(i))
    valid = json_state(memory)
    before = await _observe(memory)
    before_state = state_text(memory)
    places: list[tuple[tuple[str | int, ...], str]] = [
        ((), k) for k, v in valid.items() if type(v) is int
    ]
    assert places, "check setup: to_dict() writes no integer"
    for name, i in _turn_records(valid)[:1]:
        places += [((name, i), k) for k, v in valid[name][i].items() if type(v) is int]
    for path, field in places:
        record = valid
        for step in path:
            record = record[step]
        where = "".join(f"[{step!r}]" for step in path) + f"[{field!r}]"
        for other in (str(record[field]), float(record[field]), True):
            data = json.loads(json.dumps(valid))
            target = data
            for step in path:
                target = target[step]
            target[field] = other
            try:
                memory.from_dict(data)
            except ValueError:
                continue
            except Exception as exc:
                raise AssertionError(
                    f"SER-003: state{where}={other!r} raised {type(exc).__name__}, not ValueError"
                ) from exc
            raise AssertionError(
                f"SER-003: from_dict accepted state{where}={other!r} where to_dict() writes "
                f"the integer {record[field]!r}"
            )
    assert await _observe(memory) == before, "SER-003: a refused from_dict changed the memory"
    assert state_text(memory) == before_state, "SER-003: a refused from_dict changed to_dict()"


def _turn_records(state: dict[str, Any]) -> list[tuple[str, int]]:
    """Where ``state`` keeps turn records: ``(list field, index)``, in field order."""
    return [
        (name, i)
        for name, records in state.items()
        if isinstance(records, list)
        for i, record in enumerate(records)
        if isinstance(record, dict) and set(TURN_FIELDS) <= set(record)
    ]


def _malformed_variants(valid: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Copies of ``valid`` (a memory's own ``to_dict()``, with pending and recent turns)
    that its format cannot hold, by what is wrong with each."""

    def edited(change: Any) -> dict[str, Any]:
        state = json.loads(json.dumps(valid))
        change(state)
        return state

    records = _turn_records(valid)
    found = {"an unknown field": edited(lambda s: s.__setitem__("x_not_a_field", 1))}
    if records:
        name, i = records[0]
        found["an unknown field in a turn record"] = edited(
            lambda s: s[name][i].__setitem__("x_not_a_field", 1)
        )
    if valid.get("version") != 2:
        return found
    # The reference format: what docs/memory-state.schema.json refuses, and seqs that do
    # not number the turns in the order the state holds them (SER-003).
    for field in ("failures", "dropped_turns", "revision", "summarized_through", "next_seq"):
        found[f"{field} = -1"] = edited(lambda s, f=field: s.__setitem__(f, -1))
    if valid["health"] == "healthy":
        found["failed calls counted while HEALTHY"] = edited(lambda s: s.__setitem__("failures", 2))
        found["no failed call counted while in RETRY"] = edited(
            lambda s: s.update(health="retry", failures=0)
        )
    ordered = [(n, i) for n in ("backlog", "pending", "turns") for i in range(len(valid[n]))]
    seqs = [valid[n][i]["seq"] for n, i in ordered]
    (first, i0), (second, i1) = ordered[0], ordered[1]

    def swapped(state: dict[str, Any]) -> None:
        state[first][i0]["seq"], state[second][i1]["seq"] = seqs[1], seqs[0]

    found["a turn numbered 0"] = edited(lambda s: s[first][i0].__setitem__("seq", 0))
    found[f"two turns numbered {seqs[0]} ({first}, {second})"] = edited(
        lambda s: s[second][i1].__setitem__("seq", seqs[0])
    )
    found[f"the {first} turn numbered {seqs[1]}, after the {second} turn {seqs[0]}"] = edited(
        swapped
    )
    # Where one list ends and the next begins: a loader that checks each list alone
    # (rising within pending, rising within the turns) misses these.
    edge = next((k for k in range(1, len(ordered)) if ordered[k][0] != ordered[k - 1][0]), 0)
    if edge:
        (older, j0), (newer, j1) = ordered[edge - 1], ordered[edge]

        def crossed(state: dict[str, Any]) -> None:
            state[older][j0]["seq"], state[newer][j1]["seq"] = seqs[edge], seqs[edge - 1]

        found[f"the first {newer} turn numbered {seqs[edge - 1]}, as the last {older} turn"] = (
            edited(lambda s: s[newer][j1].__setitem__("seq", seqs[edge - 1]))
        )
        found[f"the last {older} turn numbered {seqs[edge]}, above the first {newer} turn"] = (
            edited(crossed)
        )
    found[f"next_seq {seqs[-1]}, the newest turn's seq"] = edited(
        lambda s: s.__setitem__("next_seq", seqs[-1])
    )
    found[f"summarized_through {seqs[0]}, the oldest retained turn's seq"] = edited(
        lambda s: s.__setitem__("summarized_through", seqs[0])
    )
    return found


@scenario("direction:reject", "direction:accept")
@req("SER-003")
@cap("rolling_summary")
async def test_a_state_its_format_cannot_hold_is_refused(make_memory, scripted_summarizer):
    """A field the format does not define is malformed in any format: a loader that ignored
    it would drop it at the next save. In the reference format (version 2) so are a
    negative count, failed calls counted while HEALTHY or none in RETRY, and turn numbers
    (``seq``) that do not rise from the backlog through pending to the turns, above
    ``summarized_through`` and below ``next_seq``: loaded, they would give a memory retries
    it was not configured with, cover a turn that was never summarized or number two turns
    alike. Each is refused
    with ``ValueError``, the memory unchanged, and the state it was made from still loads."""
    memory = await make_memory(config(full_zone_turns=2), summarizer=scripted_summarizer)
    scripted_summarizer.hold()  # the evicted turns stay pending
    for i in range(5):
        await memory.add_turn(turn(i, digest=True))
    await scripted_summarizer.wait_for_calls(1)
    valid = json_state(memory)
    before = await _observe(memory)
    before_state = state_text(memory)
    if valid.get("version") == 2:
        held = len(valid["pending"]) + len(valid["turns"]) + len(valid["backlog"])
        assert held >= 2, f"check setup: the state holds {held} turns, not the 5 added"
    for what, state in _malformed_variants(valid).items():
        await anyio.lowlevel.checkpoint()
        _assert_refused(memory, state, f"with {what}", "; its format cannot hold it")
        assert await _observe(memory) == before, f"SER-003: refusing {what} changed the memory"
        assert state_text(memory) == before_state, f"SER-003: refusing {what} changed to_dict()"
    try:
        memory.from_dict(valid)
    except Exception as exc:
        raise AssertionError(f"SER-002: the memory refused its own to_dict(): {exc!r}") from exc


async def _failing_memory(
    make_memory: Any, cfg: ShortTermMemoryConfig, key: MemoryKey, health: str, *, turns: int
) -> tuple[Any, ScriptedSummarizer]:
    """A memory whose every call fails, driven by ``turns`` turns into ``health``."""
    failing = ScriptedSummarizer()
    failing.fail_always("raise")
    memory = await make_memory(cfg, key=key, summarizer=failing)
    for i in range(turns):
        await memory.add_turn(turn(i))
    await failing.wait_for_calls(1)
    with anyio.move_on_after(patient(2)):
        while memory.health.value != health:  # noqa: ASYNC110 - polling a property
            await anyio.sleep(0.005)
    rule = "HLT-004" if health == "degraded" else "HLT-002"
    assert memory.health.value == health, (
        f"{rule}: the memory did not reach {health} (precondition)"
    )
    return memory, failing


@req("SER-002")
@cap("rolling_summary")
@pytest.mark.parametrize("health", ["retry", "degraded", "recovering"])
async def test_round_trip_keeps_a_failing_health(make_memory, health):
    """A memory in RETRY, DEGRADED, or RECOVERING (a recovery attempt in flight, held)
    reloads in the same health."""
    cfg = config(
        full_zone_turns=1,
        retry_attempts=2 if health == "retry" else 0,
        retry_backoff_base_s=30.0,
        degraded_retry_interval_s=0.05 if health == "recovering" else 60.0,
    )
    key = MemoryKey("t", "u", f"failing-{health}")
    if health == "recovering":
        memory, failing = await _failing_memory(make_memory, cfg, key, "degraded", turns=3)
        failing.hold()  # the next recovery attempt stays in flight
        await eventually(
            lambda: memory.health.value == "recovering",
            what="HLT-006: a recovery attempt by itself, held (precondition)",
        )
    else:
        memory, _ = await _failing_memory(make_memory, cfg, key, health, turns=3)
    if health == "retry":
        shown = users((await memory_view(memory)).get("pending_turns"))
        assert shown == ["u0", "u1"], (
            f"HLT-003: in RETRY the view shows pending {shown}, not the turns evicted, "
            "['u0', 'u1'] (precondition)"
        )
    clone_summarizer = ScriptedSummarizer()
    clone_summarizer.hold()
    clone = await make_memory(cfg, key=key, summarizer=clone_summarizer)
    state = json_state(memory)
    expected = await _observe(memory)
    clone.from_dict(state)
    await _assert_observed_as(clone, expected, f"a {health} memory does not round-trip")
    clone_summarizer.release()


@req("STR-004")
@pytest.mark.parametrize("strategy", EITHER_STRATEGY)
async def test_turns_loaded_into_a_memory_without_digests_render_without(make_memory, strategy):
    """A state written with digests, loaded into a memory configured with
    ``include_trajectory_digest=False``: its turns render as that memory renders any
    turn, without ``trajectory_digest`` (what the state keeps is not the view's)."""
    key = MemoryKey("t", "u", "digests")
    source = await make_memory(config(strategy, full_zone_turns=3), key=key)
    for i in range(3):
        await source.add_turn(turn(i, digest=True))
    assert all("trajectory_digest" in t for t in (await memory_view(source))["recent_turns"]), (
        "STR-004: turns with digests render with them (precondition)"
    )
    cfg = config(strategy, full_zone_turns=3, include_trajectory_digest=False)
    memory = await make_memory(cfg, key=key)
    memory.from_dict(json_state(source))
    shown = (await memory_view(memory))["recent_turns"]
    assert shown == [{"user": f"u{i}", "assistant": f"a{i}"} for i in range(3)], (
        f"STR-004: loaded into a memory with include_trajectory_digest=False, the turns "
        f"render as {shown}"
    )


@scenario("text:non_ascii")
@req("SER-002")
@cap("truncation")
async def test_round_trip_keeps_turn_text_verbatim(make_memory):
    """Line ends of every kind (``\r\n``, a lone ``\r``, U+2028), tabs, surrounding
    spaces, control characters (NUL too) and characters Unicode normalization would change
    (a decomposed accent, a ligature) are the turn's text: ``from_dict(to_dict())`` shows
    them as they were."""
    texts = [
        "line\r\nnext",
        "old mac\rline",
        " padded\t",
        "sep\u2028arated\u2029",
        "cafe\u0301 \ufb01le",
        # Control characters, NUL too (which some databases refuse in text).
        "nul\x00byte \x1b[0m\x7f",
    ]
    cfg, key = config("truncation", full_zone_turns=len(texts)), MemoryKey("t", "u", "text")
    memory = await make_memory(cfg, key=key)
    for i, text in enumerate(texts):
        await memory.add_turn(ConversationTurn(user_message=text, assistant_response=f"a{i}"))
    clone = await make_memory(cfg, key=key)
    clone.from_dict(json_state(memory))
    shown = [t["user"] for t in (await memory_view(clone))["recent_turns"]]
    # !a: a normalized text prints like the original in its own characters.
    assert shown == texts, f"SER-002: turn text after a round trip: {shown!a}, not {texts!a}"
    await _assert_observed_as(clone, await _observe(memory), "SER-002: the round trip")


@scenario("text:non_ascii", "text:astral")
@req("SER-002")
@cap("rolling_summary")
@pytest.mark.parametrize(
    "summary",
    [
        " \tRésumé: the user asked about refunds 🦜\n",
        "\n\n  \uff33\uff35\uff2d\u2028 ok \r\n ",
        "x ",
        "  ",
    ],
    ids=["spaces-and-newline", "blank-lines", "trailing-space", "whitespace-only"],
)
async def test_round_trip_keeps_the_summary_verbatim(make_memory, summary):
    """The summary is the summarizer's text as it came, its leading and trailing
    whitespace too, and text of whitespace only is not empty: the view shows it, and
    ``from_dict(to_dict())`` shows the same view and counts the same tokens."""

    async def summarizer(payload: Any) -> dict[str, str]:
        return {"summary": summary}

    cfg = config(full_zone_turns=1)
    key = MemoryKey("t", "u", f"verbatim-{uuid.uuid4().hex}")
    memory = await make_memory(cfg, key=key, summarizer=summarizer)
    await memory.add_turn(turn(0))
    await memory.add_turn(turn(1))  # evicts u0: the summary covers it
    await memory.flush()
    expected = await _observe(memory)
    assert f'"summary": {json.dumps(summary)}' in expected[0], (
        f"STR-003: the view shows a summary other than the text the summarizer returned, "
        f"{summary!r}: {expected[0]}"
    )
    held = ScriptedSummarizer()
    held.hold()
    clone = await make_memory(cfg, key=key, summarizer=held)
    clone.from_dict(json_state(memory))
    await _assert_observed_as(
        clone, expected, f"the summary {summary!r} does not survive from_dict(to_dict())"
    )
    held.release()


@req("SER-002")
@cap("rolling_summary")
@pytest.mark.parametrize(
    "restore",
    [
        pytest.param("from_dict"),
        pytest.param("hydrate", marks=[req("SER-005"), cap("persistence")]),
    ],
)
async def test_a_summary_degraded_memory_does_not_show_survives_a_round_trip(
    make_memory, stm_provider, stm_store, restore
):
    """A DEGRADED memory shows recent turns only (HLT-004), but it still has its summary:
    the recovery is sent it as ``previous_summary``. A state saved then keeps it, through
    ``to_dict``/``from_dict`` and through ``persist``/``hydrate``: the restored memory's
    recovery is sent the summary a memory with the same history that was never saved (the
    control) is sent, the one installed."""
    failing = False

    def recorder(payloads: list[Any]) -> Any:
        async def summarizer(payload: Any) -> dict[str, str]:
            payloads.append(payload)
            if failing:
                raise RuntimeError("the summarizer is down")
            return {"summary": f"summary #{len(payloads)} of {users(payload.get('turns'))}"}

        return summarizer

    cfg = config(full_zone_turns=1, retry_attempts=0, degraded_retry_interval_s=0.2)
    run = uuid.uuid4().hex[:8]
    sent: dict[str, list[Any]] = {"control": [], "saved": []}
    memories = {
        name: await make_memory(
            cfg, key=MemoryKey("t", "u", f"{name}-{run}"), summarizer=recorder(sent[name])
        )
        for name in sent
    }
    installed = {}
    for name, memory in memories.items():
        await memory.add_turn(turn(0))
        await memory.add_turn(turn(1))
        await memory.flush()
        installed[name] = (await memory_view(memory)).get("summary")
        if not installed[name]:
            raise PreconditionError("WM-007: flush() returned with no summary installed")
    failing = True
    for memory in memories.values():
        await memory.add_turn(turn(2))
    try:
        for memory in memories.values():
            await eventually(lambda m=memory: m.health.value == "degraded", what="DEGRADED")
    except AssertionError as exc:
        raise PreconditionError(f"HLT-004: one failed call with retry_attempts=0: {exc}") from None
    saved = memories["saved"]
    restored = await make_memory(
        cfg, key=MemoryKey("t", "u", f"saved-{run}"), summarizer=recorder(sent["saved"])
    )
    # Which state the restore reads: a summary to_dict() already lost is SER-002's fault
    # either way; one lost only on the way through the store, SER-005's.
    written = json_state(saved)
    if restore == "from_dict":
        restored.from_dict(written)
    else:
        where = stm_provider.key_for_storage(MemoryKey("t", "u", f"saved-{run}"))
        await saved.persist(stm_store, where)
        await restored.hydrate(stm_store, where)
    if hasattr(saved, "aclose"):
        await saved.aclose()  # only the restored memory recovers
    memories["saved"] = restored
    seen = {name: len(payloads) for name, payloads in sent.items()}
    failing = False
    # A turn too: a backend that attempts recovery only when a turn comes (HLT-006's fault,
    # checked elsewhere) is still judged on the summary it sends.
    for memory in memories.values():
        await memory.add_turn(turn(3))
    try:
        for name in sent:
            await eventually(lambda n=name: len(sent[n]) > seen[n], what=f"{name}: a recovery")
    except AssertionError as exc:
        raise PreconditionError(f"HLT-006: no recovery attempt came: {exc}") from None
    control = sent["control"][seen["control"]].get("previous_summary")
    if control != installed["control"]:
        raise PreconditionError(
            f"WM-004: the recovery of a memory never saved was sent previous_summary="
            f"{control!r}, not the summary installed, {installed['control']!r}"
        )
    got = sent["saved"][seen["saved"]].get("previous_summary")
    in_state = written.get("summary", installed["saved"]) == installed["saved"]
    rule = "SER-005" if restore == "hydrate" and in_state else "SER-002"
    assert got == installed["saved"], (
        f"{rule}: the memory restored by {restore} was sent previous_summary={got!r}; the "
        f"memory saved had {installed['saved']!r} installed (DEGRADED does not show it, but "
        f"keeps it, and the control memory's recovery was sent its own)"
    )


@req("SER-002")
@cap("rolling_summary")
@pytest.mark.parametrize("health", ["retry", "degraded"])
async def test_a_restored_failing_memory_recovers_by_itself(make_memory, health):
    """A restored state is checked through what the memory does next, not only at once: a
    memory restored in RETRY retries by itself (HLT-002), one restored in DEGRADED with a
    backlog attempts recovery by itself (HLT-006), and either, its first call failing
    again, goes on to reach HEALTHY with a summary of the turns it held; the count of
    dropped turns survives the round trip (HLT-005)."""
    cfg = config(
        full_zone_turns=1,
        retry_attempts=0 if health == "degraded" else 2,
        retry_backoff_base_s=0.2,
        degraded_retry_interval_s=0.2,
        recovery_backlog_limit=2,
    )
    key = MemoryKey("t", "u", f"restored-{health}")
    memory, failing = await _failing_memory(make_memory, cfg, key, health, turns=2)
    failing.hold()  # no call of the original runs while the state is taken
    if health == "degraded":
        for i in range(2, 6):  # a backlog of 2, and 2 more turns dropped
            await memory.add_turn(turn(i))
    state = json_state(memory)
    clone_summarizer = ScriptedSummarizer()
    clone_summarizer.fail_next(1, mode="raise")  # its first call fails too: it goes on alone
    clone = await make_memory(cfg, key=key, summarizer=clone_summarizer)
    clone.from_dict(state)
    assert clone.to_dict().get("dropped_turns") == state.get("dropped_turns"), (
        "HLT-005: dropped_turns changed in the round trip: the count of dropped turns "
        "is part of the state"
    )
    # The original goes on too, its calls now succeeding: if it does not heal by itself
    # either, the memory never did (HLT-002/HLT-006), whatever the round trip.
    failing.succeed()
    failing.release()
    with anyio.move_on_after(patient(5)):
        while not all(  # noqa: ASYNC110 - polling two memories' properties
            (m.health.value == "healthy" and s.completed)
            for m, s in ((clone, clone_summarizer), (memory, failing))
        ):
            await anyio.sleep(0.01)
    own = "HLT-002" if health == "retry" else "HLT-006"
    assert memory.health.value == "healthy" and failing.completed, (
        f"{own}: the original memory, in {health.upper()}, did not heal by itself either "
        f"once its summarizer succeeded (precondition)"
    )
    assert clone.health.value == "healthy" and clone_summarizer.completed, (
        f"SER-002: a memory restored in {health.upper()} made {len(clone_summarizer.calls)} "
        f"summarizer call(s) by itself and is {clone.health.value!r}: restored, it must "
        f"{'retry' if health == 'retry' else 'attempt recovery'} on its own as the original "
        "would have"
    )
    assert (await memory_view(clone)).get("summary"), "SER-002: no summary after recovery"


@scenario("bound:upper")
@req("BUD-003", "WM-002")
@cap("rolling_summary")
async def test_a_state_loaded_into_a_smaller_window_evicts_to_pending(make_memory):
    """Recent holds at most ``full_zone_turns`` after every operation, ``from_dict``
    included; turns a smaller window cannot hold are evicted, so they become pending."""
    key = MemoryKey("t", "u", "window")
    held = ScriptedSummarizer()
    held.hold()
    wide = await make_memory(config(full_zone_turns=3), key=key, summarizer=held)
    for i in range(3):
        await wide.add_turn(turn(i))
    narrow = await make_memory(config(full_zone_turns=1), key=key, summarizer=held)
    narrow.from_dict(json_state(wide))
    view = await memory_view(narrow)
    recent = [t.get("user") for t in view.get("recent_turns", [])]
    pending = [t.get("user") for t in view.get("pending_turns", [])]
    assert recent == ["u2"], f"BUD-003: recent after loading into a window of 1: {recent}"
    assert pending == ["u0", "u1"], (
        f"WM-002: turns the smaller window evicted must be pending: {pending}"
    )
    held.release()


@scenario("bound:upper")
@req("BUD-003")
@cap("rolling_summary")
async def test_a_degraded_state_loaded_into_a_smaller_window_keeps_the_newest(make_memory):
    """The same for a state saved DEGRADED: the window holds in every health, and a load
    into a smaller one keeps the newest turns recent (the others go where a DEGRADED
    memory's evicted turns go, HLT-005)."""
    key = MemoryKey("t", "u", f"window-degraded-{uuid.uuid4().hex}")
    failing = ScriptedSummarizer()
    failing.fail_always("raise")
    wide_cfg = config(full_zone_turns=3, retry_attempts=0, degraded_retry_interval_s=60.0)
    wide = await make_memory(wide_cfg, key=key, summarizer=failing)
    for i in range(6):
        await wide.add_turn(turn(i))
    await eventually(
        lambda: wide.health.value == "degraded",
        what="HLT-004: DEGRADED after a failed call with retry_attempts=0 (precondition)",
    )
    narrow_cfg = config(full_zone_turns=1, retry_attempts=0, degraded_retry_interval_s=60.0)
    narrow = await make_memory(narrow_cfg, key=key, summarizer=failing)
    narrow.from_dict(json_state(wide))
    view = await memory_view(narrow)
    recent = [t.get("user") for t in view.get("recent_turns", [])]
    assert recent == ["u5"], (
        f"BUD-003: recent after loading a DEGRADED state into a window of 1: {recent}"
    )


@scenario("bound:upper")
@req("BUD-003", "STR-002")
@cap("truncation")
async def test_a_truncation_state_loaded_into_a_smaller_window_keeps_the_newest(make_memory):
    """The same under ``truncation``: the turns a smaller window cannot hold go, the
    newest stay (STR-002), whichever format the state is in."""
    key = MemoryKey("t", "u", f"window-truncation-{uuid.uuid4().hex}")
    wide = await make_memory(config("truncation", full_zone_turns=3), key=key)
    for i in range(3):
        await wide.add_turn(turn(i))
    narrow = await make_memory(config("truncation", full_zone_turns=1), key=key)
    narrow.from_dict(json_state(wide))
    view = await memory_view(narrow)
    recent = [t.get("user") for t in view.get("recent_turns", [])]
    assert recent == ["u2"], f"BUD-003: recent after loading into a window of 1: {recent}"
    assert set(view) == {"recent_turns"}, f"STR-002: a truncation view holds only {view}"


def _heavy(text: str) -> int:
    return len(text) // 2 + 3


@scenario("bound:lower", "bound:upper")
@req("BUD-002", "SER-004")
@cap("rolling_summary")
@pytest.mark.parametrize("estimator", [None, _heavy], ids=["default", "heavy"])
async def test_a_loaded_oversize_summary_is_clipped_or_refused(make_memory, estimator):
    """Clipped, a loaded summary over ``summary_max_tokens`` keeps its longest tail within
    it, measured by the configured estimator: no more (BUD-002), and no less (the newest
    text is what the summary is for). The summary repeats nothing, so a head or a shorter
    tail shows. Several limits: 0, which no character fits (nothing is kept), and sizes at
    which a search that skips a candidate length ends on another."""
    for limit in (0, 10, 15, 28):
        await _load_oversize_summary(make_memory, estimator, limit)


@scenario("bound:upper")
@req("BUD-002", "SER-004")
@cap("rolling_summary")
@cap("persistence")
async def test_a_hydrated_oversize_summary_is_clipped_or_refused(
    make_memory, stm_provider, stm_store
):
    """The same through ``hydrate``: a record in the store, written by a memory with a
    larger ``summary_max_tokens``, is held to this memory's limit like a state given to
    ``from_dict`` (refused, it is a logged warning and no change)."""
    key = MemoryKey("t", "u", f"oversize-{uuid.uuid4().hex[:8]}")
    where = stm_provider.key_for_storage(key)

    async def hydrate(memory: Any, state: dict[str, Any]) -> None:
        await stm_store.save_memory_state(where, state)
        await memory.hydrate(stm_store, where)
        if not (await memory_view(memory)).get("recent_turns"):
            # Nothing loaded: the record was refused (SER-004 judges that, elsewhere).
            raise ValueError("hydrate refused the record")

    await _load_oversize_summary(make_memory, None, 10, load=hydrate, key=key)


async def _load_oversize_summary(
    make_memory: Any,
    estimator: Any,
    limit: int,
    *,
    load: Callable[[Any, dict[str, Any]], Awaitable[None]] | None = None,
    key: MemoryKey | None = None,
) -> None:
    cfg = config(
        full_zone_turns=2, summary_max_tokens=limit, total_max_tokens=500, token_estimator=estimator
    )
    size = estimator or default_token_estimator
    summarizer = ScriptedSummarizer()
    summarizer.hold()
    memory = await make_memory(cfg, key=key, summarizer=summarizer)
    state = _v1("rolling_summary_healthy.json")
    stored = state["summary"] = " ".join(f"fact-{i}" for i in range(80))
    try:
        if load is None:
            memory.from_dict(state)
        else:
            await load(memory, state)
    except ValueError:
        return  # refusing the state keeps BUD-002 too
    summary = (await memory_view(memory)).get("summary", "")
    assert not summary or size(summary) <= limit, (
        f"BUD-002: a loaded summary of {size(summary)} tokens exceeds summary_max_tokens={limit}"
    )
    assert stored.endswith(summary), (
        f"BUD-002: the loaded summary was clipped to {summary[:30]!r}..., not to a tail "
        f"of the stored one (its newest text), under summary_max_tokens={limit}"
    )
    longer = stored[-(len(summary) + 1) :]
    assert size(longer) > limit, (
        f"BUD-002: the loaded summary was clipped to {len(summary)} characters, but its tail "
        f"one character longer is within summary_max_tokens ({size(longer)} <= {limit} tokens)"
    )
    summarizer.release()


def _v1_fixtures() -> list[str]:
    folder = resources.files("stm_conformance") / "data" / "penguiflow_v1"
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".json"))


def _v1(name: str) -> dict[str, Any]:
    """A state PenguiFlow wrote; ``<file>+recovering``: that DEGRADED state as PenguiFlow
    writes it while a recovery attempt runs (the same, its health ``recovering``)."""
    file, _, health = name.partition("+")
    folder = resources.files("stm_conformance") / "data" / "penguiflow_v1"
    state: dict[str, Any] = json.loads((folder / file).read_text(encoding="utf-8"))
    if health:
        state["health"] = health
    return state


def _v1_turn(t: dict[str, Any]) -> dict[str, Any]:
    out = {"user": t["user_message"], "assistant": t["assistant_response"]}
    if t.get("trajectory_digest") is not None:
        out["trajectory_digest"] = t["trajectory_digest"]
    return out


@scenario("direction:accept")
@req("SER-004")
@pytest.mark.parametrize("name", [*_v1_fixtures(), "rolling_summary_degraded.json+recovering"])
async def test_penguiflow_v1_states_load(make_memory, stm_capabilities, name):
    state = _v1(name)
    snap = state["config_snapshot"]
    strategy = snap["strategy"]
    if strategy != "none" and strategy not in stm_capabilities:
        pytest.skip(f"backend does not declare capability {strategy!r}")
    cfg = ShortTermMemoryConfig(
        strategy=strategy, budget=MemoryBudget(**snap["budget"]), retry_backoff_base_s=30.0
    )
    summarizer = ScriptedSummarizer()
    summarizer.hold()
    memory = await make_memory(cfg, summarizer=summarizer)
    assert memory.health.value == "healthy", (
        f"HLT-001: a new {strategy} memory is {memory.health.value!r} (precondition)"
    )
    memory.from_dict(state)
    view = await memory_view(memory)
    assert memory.health.value == state["health"], (
        f"SER-004: {name} (health {state['health']!r}) loaded as {memory.health.value!r}"
    )
    if state.get("backlog") and "serialization" in stm_capabilities:
        # The view of a DEGRADED memory does not show its backlog; the reference format
        # (version 2) does, which is what the recovery will be sent.
        saved = memory.to_dict()
        if saved.get("version") == 2:
            kept = [record.get("user_message") for record in saved.get("backlog") or []]
            stored = [t["user_message"] for t in state["backlog"]]
            assert kept == stored, f"SER-004: the backlog {stored} of {name} loaded as {kept}"
    if strategy == "none":
        assert view == {}, f"STR-001: strategy none shows {view}"
        return
    _assert_v1_turns(view["recent_turns"], state["turns"], f"recent turns of {name}", "SER-004")
    if strategy == "rolling_summary" and state["health"] in ("healthy", "retry"):
        # Loaded faithfully, a RETRY state must show what HLT-003 requires of RETRY.
        rule = "HLT-003" if state["health"] == "retry" else "SER-004"
        assert view.get("summary", "") == state["summary"], f"{rule}: summary of {name}"
        _assert_v1_turns(
            view.get("pending_turns", []), state["pending"], f"pending turns of {name}", rule
        )
    summarizer.release()


def _assert_v1_turns(got: list[Any], stored: list[dict[str, Any]], what: str, rule: str) -> None:
    """The view's turns are the stored ones, rendered as the spec has it: a difference in
    the rendering alone (the same messages) is STR-004's, any other ``rule``'s."""
    want = [_v1_turn(t) for t in stored]
    if got == want:
        return
    texts = [(t.get("user"), t.get("assistant")) for t in got if isinstance(t, dict)]
    same = texts == [(t["user"], t["assistant"]) for t in want]
    raise AssertionError(
        f"{'STR-004' if same else rule}: {what}: the view shows {got}, the state holds {want}"
    )


#: What a memory without a summarizer never holds, as changes to a v1 state of its own.
_NEVER_WITHOUT_SUMMARIZER = {
    "retry": {"health": "retry"},
    "degraded": {"health": "degraded"},
    "recovering": {"health": "recovering"},
    "summary": {"summary": "- the user asked for a refund"},
    "pending": {"pending": "TURN"},
    "backlog": {"backlog": "TURN"},
    "turns-of-none": {"turns": "TURN"},
}


@scenario("direction:reject", "direction:accept")
@req("SER-003")
@pytest.mark.parametrize(
    ("strategy", "change"),
    [
        *(pytest.param("none", c, id=f"none-{c}") for c in _NEVER_WITHOUT_SUMMARIZER),
        *(
            pytest.param("truncation", c, id=f"truncation-{c}", marks=cap("truncation"))
            for c in _NEVER_WITHOUT_SUMMARIZER
            if c != "turns-of-none"
        ),
    ],
)
async def test_a_state_holding_what_its_strategy_never_holds_is_refused(
    make_memory, strategy, change
):
    """A ``none`` or ``truncation`` memory has no summarizer: it is HEALTHY for good, and
    holds no summary, pending or backlog turn (``none`` no turn at all). A state that says
    otherwise is malformed: loaded, a DEGRADED truncation memory would report it forever,
    and turns no view shows would be carried from save to save. The states are PenguiFlow's
    version 1 format (SER-004), which every backend reads."""
    fixture = "empty_strategy_none.json" if strategy == "none" else "truncation_with_digest.json"
    valid = _v1(fixture)
    held = _v1("truncation_with_digest.json")["turns"][0]
    cfg = ShortTermMemoryConfig(
        strategy=strategy, budget=MemoryBudget(**valid["config_snapshot"]["budget"])
    )
    memory = await make_memory(cfg)
    try:
        memory.from_dict(valid)
    except Exception as exc:
        raise AssertionError(f"SER-004: {fixture} did not load: {exc!r} (precondition)") from exc
    before = await _observe(memory)
    own = memory.to_dict()
    before_state = json.dumps(own, sort_keys=True)
    edit = _NEVER_WITHOUT_SUMMARIZER[change]
    states = {"version 1": valid}
    # The memory's own format too, where it keeps these fields under the same names (as
    # the reference's version 2 does): a turn there is one of its own turn records.
    own_turn = next(iter(own.get("turns") or []), None)
    if set(edit) <= set(own) and (own_turn is not None or "TURN" not in edit.values()):
        states["its own format"] = own
    for name, state in states.items():
        record = held if name == "version 1" else own_turn
        changed = {**state, **{k: [record] if v == "TURN" else v for k, v in edit.items()}}
        try:
            memory.from_dict(changed)
        except ValueError:
            pass
        except Exception as exc:
            raise AssertionError(
                f"SER-003: from_dict of a {strategy} state ({name}) with {change} raised "
                f"{type(exc).__name__}, not ValueError"
            ) from exc
        else:
            raise AssertionError(
                f"SER-003: a {strategy} memory loaded a state ({name}) with {change} "
                f"(health now {memory.health.value!r}); a memory without a summarizer never "
                "holds one, so the state is malformed"
            )
        assert await _observe(memory) == before, "SER-003: a refused from_dict changed the memory"
        assert state_text(memory) == before_state, "SER-003: a refused from_dict changed to_dict()"


@scenario("direction:accept")
@req("SER-004", "SER-005")
@cap("persistence")
@pytest.mark.parametrize("name", ["rolling_summary_pending.json", "truncation_with_digest.json"])
async def test_a_penguiflow_v1_record_in_a_store_hydrates(
    make_memory, stm_provider, stm_capabilities, stm_store, name
):
    """A deployment migrates by hydrating the records PenguiFlow's own ``persist`` wrote:
    version 1 states, which record no key and no storage key. ``hydrate`` loads them as
    ``from_dict`` does."""
    state = _v1(name)
    snap = state["config_snapshot"]
    if snap["strategy"] not in stm_capabilities:
        pytest.skip(f"backend does not declare capability {snap['strategy']!r}")
    cfg = ShortTermMemoryConfig(
        strategy=snap["strategy"], budget=MemoryBudget(**snap["budget"]), retry_backoff_base_s=30.0
    )
    key = MemoryKey("t", "u", f"v1-record-{uuid.uuid4().hex}")
    storage = stm_provider.key_for_storage(key)
    await stm_store.save_memory_state(storage, state)
    summarizer = ScriptedSummarizer()
    summarizer.hold()
    hydrated = await make_memory(cfg, key=key, summarizer=summarizer)
    await hydrated.hydrate(stm_store, storage)
    loaded = await make_memory(cfg, summarizer=summarizer)
    loaded.from_dict(state)
    got, want = await memory_view(hydrated), await memory_view(loaded)
    assert got == want, (
        f"SER-004: the v1 record {name} hydrated shows {got}, not what from_dict of it "
        f"shows: {want}"
    )
    summarizer.release()


@scenario("bound:lower", "bound:upper")
@req("HLT-004", "HLT-005", "SER-004")
@pytest.mark.stm_capability("rolling_summary")
async def test_a_loaded_healthy_v1_state_has_no_failures_and_no_drops(make_memory):
    """A HEALTHY state written by PenguiFlow records no failure and no dropped turn, and
    loaded it has none: ``dropped_turns`` is 0, and when every call then fails the memory
    makes the first attempt and ``retry_attempts`` retries, no fewer and no more, before
    DEGRADED."""
    state = _v1("rolling_summary_healthy.json")
    summarizer = ScriptedSummarizer()
    summarizer.fail_always("raise")
    cfg = config(full_zone_turns=1, retry_attempts=2)
    memory = await make_memory(cfg, summarizer=summarizer)
    try:
        memory.from_dict(state)
    except Exception as exc:
        raise AssertionError(f"SER-004: a HEALTHY v1 state did not load: {exc!r}") from exc
    dropped = memory.to_dict().get("dropped_turns", 0)
    assert dropped == 0, f"HLT-005: a loaded v1 state dropped no turn, dropped_turns={dropped}"
    await memory.add_turn(turn(0))  # the window of 1 evicts the state's turns: a call starts
    await eventually(
        lambda: memory.health.value == "degraded",
        what="HLT-002: retries the memory schedules itself, then DEGRADED (precondition)",
    )
    assert len(summarizer.calls) == cfg.retry_attempts + 1, (
        f"HLT-004: a loaded HEALTHY v1 state has no failures yet: the first attempt and "
        f"{cfg.retry_attempts} retries before DEGRADED, got {len(summarizer.calls)} calls"
    )


@req("SER-005", "SER-002")
@cap("persistence")
@pytest.mark.stm_capability("rolling_summary")
async def test_persist_then_hydrate_into_a_fresh_memory(
    make_memory, scripted_summarizer, stm_provider, stm_store
):
    key = MemoryKey("t", "u", "persisted")
    cfg = config(full_zone_turns=2)
    memory = await make_memory(cfg, key=key, summarizer=scripted_summarizer)
    for i in range(5):
        await memory.add_turn(turn(i, digest=True))
    await memory.flush()
    await memory.persist(stm_store, stm_provider.key_for_storage(key))
    fresh = await make_memory(cfg, key=key, summarizer=ScriptedSummarizer())
    await fresh.hydrate(stm_store, stm_provider.key_for_storage(key))
    await _assert_observed_as(fresh, await _observe(memory), "SER-005: the hydrated state")


@req("SER-005")
@cap("persistence")
@pytest.mark.stm_capability("rolling_summary")
async def test_a_degraded_backlog_persists_and_hydrates(make_memory, stm_provider, stm_store):
    """The DEGRADED backlog is state like the rest: a memory hydrated from what a degraded
    one persisted holds the turns waiting for recovery, and its recovery is sent them. (Its
    view, recent turns only, would not tell.)"""
    failing = True
    sent: list[list[str]] = []

    async def summarizer(payload: Any) -> dict[str, str]:
        sent.append(users(payload.get("turns")))
        if failing:
            raise RuntimeError("the summarizer is down")
        return {"summary": "recovered"}

    key = MemoryKey("t", "u", f"backlog-{uuid.uuid4().hex[:8]}")
    where = stm_provider.key_for_storage(key)
    cfg = config(full_zone_turns=1, retry_attempts=0, degraded_retry_interval_s=0.2)
    memory = await make_memory(cfg, key=key, summarizer=summarizer)
    for i in range(3):  # u0 fails its call: DEGRADED; u1 evicted into the backlog
        await memory.add_turn(turn(i))
    try:
        await eventually(lambda: memory.health.value == "degraded", what="DEGRADED")
    except AssertionError as exc:
        raise PreconditionError(f"HLT-004: one failed call with retry_attempts=0: {exc}") from None
    await memory.persist(stm_store, where)
    fresh = await make_memory(cfg, key=key, summarizer=summarizer)
    await fresh.hydrate(stm_store, where)
    if hasattr(memory, "aclose"):
        await memory.aclose()  # only the hydrated memory recovers
    seen, failing = len(sent), False
    await fresh.add_turn(turn(3))  # a turn too: HLT-006's recovery without one is checked apart
    try:
        await eventually(lambda: len(sent) > seen, what="a recovery attempt")
    except AssertionError as exc:
        raise PreconditionError(f"HLT-006: the hydrated memory never recovered: {exc}") from None
    await returns_within(fresh.flush(), what="WM-007: flush() once recovering")
    after = [u for call in sent[seen:] for u in call]
    if {"u0", "u1"} <= set(after) and after[:2] != ["u0", "u1"]:
        raise PreconditionError(f"WM-004: the backlog was sent out of order: {sent[seen:]}")
    assert after[:2] == ["u0", "u1"], (
        f"SER-005: the degraded memory persisted held u0 and u1 in its backlog; the memory "
        f"hydrated from it sent its recoveries {sent[seen:]}"
    )


@scenario("window:0")
@req("SER-005", "SER-002")
@cap("persistence")
@pytest.mark.stm_capability("rolling_summary")
async def test_a_state_without_turns_persists_and_hydrates(
    make_memory, scripted_summarizer, stm_provider, stm_store
):
    """A record holding no turn is a record, not an absent one: a summary-only state
    (``full_zone_turns=0``, every turn summarized) hydrates into a fresh memory, and a new
    memory's empty state hydrates over a memory that holds turns, replacing them."""
    key = MemoryKey("t", "u", "turnless")
    storage = stm_provider.key_for_storage(key)
    cfg = config(full_zone_turns=0)
    memory = await make_memory(cfg, key=key, summarizer=scripted_summarizer)
    for i in range(3):
        await memory.add_turn(turn(i, digest=True))
    await memory.flush()
    view = await memory_view(memory)
    assert view.get("summary") and not view.get("pending_turns") and not view["recent_turns"], (
        f"WM-002: every turn summarized with full_zone_turns=0 (precondition): {view}"
    )
    await memory.persist(stm_store, storage)
    fresh = await make_memory(cfg, key=key, summarizer=ScriptedSummarizer())
    await fresh.hydrate(stm_store, storage)
    await _assert_observed_as(
        fresh,
        await _observe(memory),
        f"SER-005: a summary-only state persisted and hydrated into a fresh memory shows "
        f"{await memory_view(fresh)}, not {view}",
    )
    # Under a storage key of its own: over the summary's record, a new memory's save is a
    # stale write a conditional store refuses (SER-006).
    empty = await make_memory(cfg, key=key, summarizer=ScriptedSummarizer())
    await empty.persist(stm_store, f"{storage}:empty")
    await memory.hydrate(stm_store, f"{storage}:empty")
    await _assert_observed_as(
        memory,
        await _observe(empty),
        f"SER-005: a new memory's state hydrated over one that holds a summary left "
        f"{await memory_view(memory)}",
    )


@req("SER-005", "SER-002")
@cap("persistence")
@pytest.mark.stm_capability("truncation")
async def test_persist_after_loading_another_state_writes_the_loaded_one(
    make_memory, stm_provider, stm_store
):
    """A memory persists, then hydrates another conversation of its key (saved under
    another storage key; the same turn numbers, other text) and persists again: the store
    then holds the conversation loaded, not what the memory held before."""
    key = MemoryKey("t", "u", "reloaded")
    cfg = config("truncation", full_zone_turns=3)
    storage = stm_provider.key_for_storage(key)
    elsewhere = f"{storage}:elsewhere"
    first = await make_memory(cfg, key=key)
    other = await make_memory(cfg, key=key)
    for i in range(3):
        await first.add_turn(turn(i))
        await other.add_turn(turn(i, pad=5, digest=True))
    await first.persist(stm_store, storage)
    await other.persist(stm_store, elsewhere)
    await first.hydrate(stm_store, elsewhere)
    await _assert_observed_as(first, await _observe(other), "SER-005: the hydrated state")
    await first.persist(stm_store, storage)
    fresh = await make_memory(cfg, key=key)
    await fresh.hydrate(stm_store, storage)
    await _assert_observed_as(
        fresh,
        await _observe(other),
        "SER-005: persisting after hydrating another state must write the state now held, "
        "not turns of the one it replaced",
    )


@req("SER-005")
@cap("persistence")
@pytest.mark.stm_capability("truncation")
async def test_hydrate_of_an_absent_key_changes_nothing(make_memory, stm_store):
    memory = await make_memory(config("truncation", full_zone_turns=2))
    await memory.add_turn(turn(1))
    before = await _observe(memory)
    await memory.hydrate(stm_store, "absent:key:here")
    assert await _observe(memory) == before


@req("SER-006")
@cap("persistence")
@pytest.mark.stm_capability("truncation")
@pytest.mark.parametrize("conditional", [False, True], ids=["store", "conditional_store"])
async def test_each_persist_carries_the_next_revision(
    make_memory, stm_provider, stm_store, conditional
):
    """Also through a store that offers a conditional save (the kit's), which a backend
    may use instead of ``save_memory_state``: the revision written is the same either way."""
    store = ConditionalKitStateStore() if conditional else stm_store
    key = MemoryKey("t", "u", "revisions")
    storage = stm_provider.key_for_storage(key)
    cfg = config("truncation", full_zone_turns=2)
    through = "through a store with save_memory_state_if" if conditional else "through the store"

    async def persist(memory: Any) -> Any:
        try:
            await memory.persist(store, storage)
        except KitStaleStateError as exc:
            raise AssertionError(
                f"SER-006: a conditional save of the only writer was refused: {exc}"
            ) from exc
        return (await store.load_memory_state(storage)).get("revision")

    memory = await make_memory(cfg, key=key)
    revisions = []
    for i in range(3):
        await memory.add_turn(turn(i))
        revisions.append(await persist(memory))
    first = revisions[0]
    assert isinstance(first, int) and revisions == [first, first + 1, first + 2], (
        f"SER-006: three persists {through} wrote revisions {revisions}, each one higher"
    )
    fresh = await make_memory(cfg, key=key)
    await fresh.hydrate(store, storage)
    written = await persist(fresh)
    assert written == revisions[-1] + 1, (
        f"SER-006: persisting {through} a state hydrated at revision {revisions[-1]} wrote "
        f"revision {written}, not {revisions[-1] + 1}"
    )
    # Nothing changed since: each persist is still a write of its own, one revision higher
    # (a writer that skips or repeats it could not tell a stale write from its own).
    again = [await persist(fresh), await persist(fresh)]
    assert again == [written + 1, written + 2], (
        f"SER-006: two more persists {through} with nothing changed wrote revisions {again}, "
        f"not {[written + 1, written + 2]}"
    )
    # A save the store refused wrote nothing: the next one carries the next revision still.
    # (What persist raises then, the store's error or one of the backend's, is not this
    # requirement's.)
    with contextlib.suppress(Exception):
        await fresh.persist(_FailingStore(store), storage)
    after = await persist(fresh)
    assert after == again[-1] + 1, (
        f"SER-006: after a save the store refused, a persist {through} wrote revision {after}, "
        f"not {again[-1] + 1}: the refused save wrote nothing"
    )


class _StoreDown(ConnectionError):
    """What :class:`_FailingStore` raises."""


class _FailingStore:
    """``store``, down: every save raises (a backend may save through either method)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    async def save_memory_state(self, key: str, state: Any) -> None:
        raise _StoreDown("the store is down")

    async def save_memory_state_if(self, key: str, state: Any, **kwargs: Any) -> None:
        raise _StoreDown("the store is down")

    async def load_memory_state(self, key: str) -> Any:
        return await self._store.load_memory_state(key)
