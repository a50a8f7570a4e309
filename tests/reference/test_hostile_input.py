"""Input no store could keep, and summarizers that misbehave: refused or survived, never
poisoning a session or freezing the event loop (``reference_impl.inputs``)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import json
import logging
import math
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from stm_stores import SQLiteStateStore

from reference_impl import (
    ConversationTurn,
    DefaultShortTermMemory,
    MemoryBudget,
    MemoryHealth,
    MemoryKey,
    ShortTermMemoryConfig,
    TrajectoryDigest,
)
from reference_impl.inputs import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    MAX_REVISION,
    MAX_TURN_ID,
    STORED_TURN_FIELDS,
    check_json,
    read_plain_turn,
)
from reference_impl.schema import TurnV2, _read_turn

pytestmark = pytest.mark.anyio

LONE = "\ud800"


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _config(**changes: Any) -> ShortTermMemoryConfig:
    options: dict[str, Any] = {
        "strategy": "rolling_summary",
        "budget": MemoryBudget(full_zone_turns=1),
        "retry_backoff_base_s": 0.001,
        "degraded_retry_interval_s": 0.001,
    }
    options.update(changes)
    return ShortTermMemoryConfig(**options)


async def _summarize(payload: Mapping[str, Any]) -> dict[str, str]:
    return {"summary": f"{len(payload['turns'])} turns"}


BAD_TURNS: dict[str, ConversationTurn] = {
    "surrogate-user": ConversationTurn(f"a{LONE}b", "a"),
    "surrogate-assistant": ConversationTurn("u", LONE),
    "surrogate-tool": ConversationTurn("u", "a", TrajectoryDigest([LONE], "o")),
    "surrogate-observations": ConversationTurn("u", "a", TrajectoryDigest([], LONE)),
    "surrogate-reasoning": ConversationTurn("u", "a", TrajectoryDigest([], "o", LONE)),
    "surrogate-artifact-ref": ConversationTurn("u", "a", TrajectoryDigest([], "o", None, [LONE])),
    "surrogate-artifact-key": ConversationTurn("u", "a", artifacts_shown={LONE: 1}),
    "surrogate-artifact-value": ConversationTurn("u", "a", artifacts_shown={"k": [LONE]}),
    "surrogate-hidden-ref": ConversationTurn("u", "a", artifacts_hidden_refs=[LONE]),
    "artifacts-too-deep": ConversationTurn("u", "a", artifacts_shown={"k": _nested(MAX_DEPTH)}),
    "artifacts-far-too-deep": ConversationTurn("u", "a", artifacts_shown={"k": _nested(5000)}),
    "artifacts-inf": ConversationTurn("u", "a", artifacts_shown={"k": {"x": float("-inf")}}),
    "artifacts-int-too-long": ConversationTurn("u", "a", artifacts_shown={"k": [-(10**4300)]}),
    "ts-beyond-float": ConversationTurn("u", "a", ts=10**400),
    "ts-int-no-float-holds": ConversationTurn("u", "a", ts=2**53 + 1),
    "surrogate-turn-id": ConversationTurn("u", "a", turn_id=f"id-{LONE}"),
    "empty-turn-id": ConversationTurn("u", "a", turn_id=""),
    "long-turn-id": ConversationTurn("u", "a", turn_id="x" * 257),
    "int-turn-id": ConversationTurn("u", "a", turn_id=7),  # type: ignore[arg-type]
}


@pytest.mark.requirement("SER-001", "SER-002")
@pytest.mark.parametrize("kind", sorted(BAD_TURNS))
async def test_a_turn_no_store_could_keep_is_refused_and_changes_nothing(kind: str) -> None:
    memory = DefaultShortTermMemory(config=_config(), summarizer=_summarize)
    await memory.add_turn(ConversationTurn("first", "turn"))
    before = (memory.to_dict(), await memory.get_llm_context(), memory.estimate_tokens())
    with pytest.raises(TypeError) as refused:
        await memory.add_turn(BAD_TURNS[kind])
    message = str(refused.value)
    assert "ConversationTurn" in message or "TrajectoryDigest" in message, message
    assert len(message) < 400, "a deep path is shortened in the message"
    assert (memory.to_dict(), await memory.get_llm_context(), memory.estimate_tokens()) == before
    await memory.aclose()


@pytest.mark.requirement("SER-002")
async def test_what_add_turn_accepts_round_trips_through_sqlite(tmp_path: Path) -> None:
    """Astral and combining text, the deepest artifacts accepted, huge and tiny numbers."""
    turn = ConversationTurn(
        "🐧 e\u0301 \u0000 \u2028",
        "",
        TrajectoryDigest(["🔧"], "o\u0301", "", ["ref"]),
        artifacts_shown={
            "deep": _nested(MAX_DEPTH - 1),  # the deepest accepted
            "big": 10**30,
            "longest": -(10**MAX_INT_DIGITS - 1),  # the int of the most digits accepted
            "tiny": 5e-324,
            "": None,
        },
        ts=1e300,
    )
    key = MemoryKey("t", "u", "s")
    memory = DefaultShortTermMemory(config=_config(), summarizer=_summarize, key=key)
    await memory.add_turn(turn)
    store = SQLiteStateStore(tmp_path / "state.db")
    await memory.persist(store, "k")
    other = DefaultShortTermMemory(config=_config(), summarizer=_summarize, key=key)
    await other.hydrate(store, "k")
    assert other.to_dict()["turns"] == memory.to_dict()["turns"]
    assert await other.get_llm_context() == await memory.get_llm_context()
    await memory.aclose()
    await other.aclose()
    store.close()


def _state_with(change: str) -> dict[str, Any]:
    memory = DefaultShortTermMemory(config=_config(), summarizer=_summarize)
    state = memory.to_dict()
    state["next_seq"] = 2
    state["turns"] = [
        {
            "seq": 1,
            "user_message": "u",
            "assistant_response": "a",
            "trajectory_digest": None,
            "artifacts_shown": {},
            "artifacts_hidden_refs": [],
            "ts": 0.0,
        }
    ]
    turn = state["turns"][0]
    if change == "nan-artifact":
        turn["artifacts_shown"] = {"x": [float("nan")]}
    elif change == "int-too-long-artifact":
        turn["artifacts_shown"] = {"x": 10**MAX_INT_DIGITS}
    elif change == "surrogate-summary":
        state["summary"] = f"ok{LONE}"
    elif change == "surrogate-message":
        turn["user_message"] = LONE
    elif change == "surrogate-key":
        state["key"] = {"tenant_id": LONE, "user_id": "u", "session_id": "s"}
    elif change == "too-deep-artifact":
        turn["artifacts_shown"] = {"x": _nested(MAX_DEPTH)}
    elif change == "revision-past-int64":
        state["revision"] = MAX_REVISION + 1
    elif change == "version-true":
        state["version"] = True
    elif change == "version-float":
        state["version"] = 2.0
    elif change == "object-in-snapshot":
        state["config_snapshot"] = {"x": object()}
    elif change == "departed-id-empty":
        state["departed_turn_ids"] = ["a", ""]
    elif change == "departed-id-long":
        state["departed_turn_ids"] = ["x" * (MAX_TURN_ID + 1)]
    elif change == "departed-id-surrogate":
        state["departed_turn_ids"] = [f"id-{LONE}"]
    elif change == "departed-id-int":
        state["departed_turn_ids"] = [7]
    return state


@pytest.mark.requirement("SER-003")
@pytest.mark.parametrize(
    "change",
    [
        "nan-artifact",
        "int-too-long-artifact",
        "surrogate-summary",
        "surrogate-message",
        "surrogate-key",
        "too-deep-artifact",
        "revision-past-int64",
        "version-true",
        "version-float",
        "object-in-snapshot",
        "departed-id-empty",
        "departed-id-long",
        "departed-id-surrogate",
        "departed-id-int",
    ],
)
def test_from_dict_refuses_what_add_turn_would_refuse(change: str) -> None:
    memory = DefaultShortTermMemory(config=_config(), summarizer=_summarize)
    memory.from_dict(_state_with("none"))  # the same state, unchanged, loads
    before = json.dumps(memory.to_dict(), sort_keys=True)
    with pytest.raises(ValueError):
        memory.from_dict(_state_with(change))
    assert json.dumps(memory.to_dict(), sort_keys=True) == before


async def test_the_last_revision_refuses_to_advance(tmp_path: Path) -> None:
    state = _state_with("none")
    state["revision"] = MAX_REVISION
    memory = DefaultShortTermMemory(config=_config(), summarizer=_summarize)
    memory.from_dict(copy.deepcopy(state))
    store = SQLiteStateStore(tmp_path / "state.db")
    with pytest.raises(ValueError, match="cannot advance"):
        await memory.persist(store, "k")
    assert memory.to_dict()["revision"] == MAX_REVISION
    await memory.aclose()
    store.close()


def test_check_json_names_the_path_and_the_problem() -> None:
    with pytest.raises(ValueError, match=r"x\['a'\]\[1\]: nan is not a finite number"):
        check_json({"a": [1, float("nan")]}, "x")
    with pytest.raises(TypeError, match=r"x\['a'\]: tuple is not plain JSON data"):
        check_json({"a": (1,)}, "x")
    with pytest.raises(TypeError, match="key 1 is not a str"):
        check_json({1: "a"}, "x")
    check_json({"a": [1, 2.5, None, True, "é", {"b": []}]}, "x")  # plain data passes


def _check_json_by_paths(value: Any, where: str, max_depth: int) -> None:
    """``check_json`` as first written: a path string for every value on the way. The
    reading that names each problem plainly, kept to judge the one that writes a path only
    for the error."""
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(
                    f"{path}: lone surrogate {item[exc.start]!r} at index {exc.start}: "
                    "not valid Unicode text"
                ) from None
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            try:
                str(item)  # as json.dumps does: Python refuses ints of more than 4300 digits
            except ValueError:
                raise ValueError(
                    f"{path}: an int of more than 4300 digits, which no store can write as JSON"
                ) from None
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(f"{path}: {item!r} is not a finite number")
        elif isinstance(item, dict | list):
            if depth >= max_depth:
                raise ValueError(f"{path}: nested deeper than {max_depth} levels")
            if isinstance(item, list):
                stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(item))
                continue
            for k, v in item.items():
                if not isinstance(k, str):
                    raise TypeError(f"{path}: key {k!r} is not a str")
                _check_json_by_paths(k, f"{path} key {k!r}", 1)
                stack.append((v, f"{path}[{k!r}]", depth + 1))
        else:
            raise TypeError(f"{path}: {type(item).__name__} is not plain JSON data")


#: The int of the most digits a store can write (4300, Python's limit for int to text).
_LONGEST_INT = 10**MAX_INT_DIGITS - 1
# Lone surrogates among the characters (hypothesis' own text strategies leave them out).
_TEXT = st.text(st.sampled_from(["a", "é", "\x00", "🐧", "\ud800", "\udfff"]), max_size=4)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    # Mapped: hypothesis' repr of a strategy that lists these ints would exceed the limit.
    st.integers(0, 2).map(lambda i: (_LONGEST_INT, _LONGEST_INT + 1, -_LONGEST_INT - 1)[i]),
    st.floats(),  # NaN and ±inf among them
    _TEXT,
    st.tuples(st.integers()),
    st.builds(object),
)
_KEYS = st.one_of(_TEXT, st.integers(0, 3))
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=12,
)


@given(_VALUES, st.integers(0, 4))
@settings(max_examples=400, deadline=None)
# Containers at the depth limit and one below it, in dicts and in lists.
@example({"a": {"b": {}}}, 2)
@example({"a": {"b": {}}}, 3)
@example([[[]]], 2)
@example([[[]]], 3)
@example({"a": [{"b": 1.5}]}, 2)
@example({"a": [_LONGEST_INT, -_LONGEST_INT]}, 2)
@example({"a": [1, _LONGEST_INT + 1]}, 2)
def test_check_json_refuses_what_the_plain_reading_refuses_with_the_same_message(
    value: Any, max_depth: int
) -> None:
    expected: Exception | None = None
    try:
        _check_json_by_paths(value, "x", max_depth)
    except (TypeError, ValueError) as exc:
        expected = exc
    if expected is None:
        check_json(value, "x", max_depth=max_depth)
        return
    with pytest.raises(type(expected)) as raised:
        check_json(value, "x", max_depth=max_depth)
    assert str(raised.value) == str(expected)


def test_check_json_takes_data_deeper_than_the_recursion_limit_when_allowed() -> None:
    deep = _nested(5_000)
    check_json(deep, "x", max_depth=10_000)  # no RecursionError
    with pytest.raises(ValueError, match="nested deeper than 4999 levels"):
        check_json(deep, "x", max_depth=4_999)


class _Text(str):
    """A str that is not exactly a str."""


class _IntLike(int):
    """An int that is not exactly an int."""


class _Mapping(collections.UserDict[str, Any]):
    """A mapping that is not a dict."""


def _chain(containers: int) -> Any:
    """``containers`` dicts, each the only value of the one before."""
    value: Any = "leaf"
    for _ in range(containers):
        value = {"a": value}
    return value


# A stored turn as to_dict writes one (with or without a digest, artifacts, an id), then
# up to three of its fields changed, each to a value the model refuses or reads
# differently (bool and int where a float or int is due, str subclasses, NaN, lone
# surrogates, tuples, int keys, empty and overlong ids, nesting past the limit), or left
# out, or an unknown field added.
_VALID_TEXT = st.text(st.sampled_from(["a", "é", "\x00", "🐧"]), max_size=4)
_PLAIN = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        _VALID_TEXT,
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_VALID_TEXT, inner, max_size=3),
    max_leaves=8,
)
_DIGEST = st.fixed_dictionaries(
    {"tools_invoked": st.lists(_VALID_TEXT, max_size=2), "observations_summary": _VALID_TEXT},
    optional={
        "reasoning_summary": st.none() | _VALID_TEXT,
        "artifacts_refs": st.lists(_VALID_TEXT, max_size=2),
    },
)
_COMMON_TURN = st.fixed_dictionaries(
    {
        "seq": st.integers(1, 3),
        "user_message": _VALID_TEXT,
        "assistant_response": _VALID_TEXT,
        "trajectory_digest": st.none() | _DIGEST,
        "artifacts_shown": st.builds(dict) | st.dictionaries(_VALID_TEXT, _PLAIN, max_size=3),
        "artifacts_hidden_refs": st.builds(list) | st.lists(_VALID_TEXT, max_size=2),
        "ts": st.floats(-1e6, 1e6),
        "turn_id": st.one_of(st.none(), _VALID_TEXT.filter(bool)),
    }
)
_ODD_TEXTS = [LONE, "a\udfff", _Text("a"), None, b"a", 1]
_TOOLS = {"tools_invoked": ["t"], "observations_summary": "o"}
#: For each field of a stored turn, values the model refuses or reads differently from
#: the common shape; ``extra`` is a field it does not know.
_ODD_FIELDS: dict[str, list[Any]] = {
    "seq": [0, -1, True, False, 2**70, 1.0, "1", None],
    "user_message": _ODD_TEXTS,
    "assistant_response": _ODD_TEXTS,
    "trajectory_digest": [
        {},
        {"tools_invoked": ["t"]},
        {"observations_summary": "o"},
        {**_TOOLS, "tools_invoked": ("t",)},
        {**_TOOLS, "tools_invoked": [LONE]},
        {**_TOOLS, "tools_invoked": [_Text("t")]},
        {**_TOOLS, "tools_invoked": "t"},
        {**_TOOLS, "observations_summary": _Text("o")},
        {**_TOOLS, "observations_summary": None},
        {**_TOOLS, "reasoning_summary": 1},
        {**_TOOLS, "reasoning_summary": LONE},
        {**_TOOLS, "artifacts_refs": None},
        {**_TOOLS, "artifacts_refs": [1]},
        {**_TOOLS, "extra": 1},
        _Mapping(_TOOLS),
        "t",
        [],
    ],
    "artifacts_shown": [
        {1: "a"},
        {_Text("a"): 1},
        {LONE: 1},
        {"a": math.nan},
        {"a": [1, math.inf]},
        {"a": {"b": {1: 2}}},
        {"a": ("t",)},
        {"a": [_Text("x")]},
        {"a": {"b": LONE}},
        {"a": 2**70, "b": True, "c": None, "d": 1.5, "e": [], "f": {}},
        {"a": [10**MAX_INT_DIGITS - 1]},
        {"a": [10**MAX_INT_DIGITS]},
        {"a": _IntLike(1)},
        {"a": object()},
        _chain(MAX_DEPTH),
        _chain(MAX_DEPTH + 1),
        _Mapping({"a": 1}),
        [],
        None,
    ],
    "artifacts_hidden_refs": [["a"], [LONE], [_Text("a")], [1], ("a",), (), None],
    "ts": [math.nan, math.inf, -math.inf, 0, 1, 2**1100, True, "1.5", None],
    "turn_id": [*_ODD_TEXTS, "", "a" * MAX_TURN_ID, "é" * (MAX_TURN_ID + 1)],
    "extra": [0],
}
#: Each field of a stored turn set to each of its odd values (docs/reliability.md).
ODD_STORED_FIELDS = [(name, value) for name, values in _ODD_FIELDS.items() for value in values]
#: Generated stored turns given to both readings (docs/reliability.md).
GENERATED_STORED_TURNS = 400


@st.composite
def _stored_turns(draw: st.DrawFn) -> Any:
    """A turn of the common shape with up to three fields changed to an odd value or left
    out; now and then not a dict at all (a mapping of another type, or its items)."""
    raw = draw(_COMMON_TURN)
    for name, value in draw(st.lists(st.sampled_from(ODD_STORED_FIELDS), max_size=3)):
        if draw(st.integers(0, 4)) == 0:
            raw.pop(name, None)
        else:
            raw[name] = value
    return draw(st.sampled_from([raw, raw, raw, raw, raw, _Mapping(raw), list(raw.items())]))


def test_the_stored_turn_fields_are_the_models() -> None:
    assert set(TurnV2.model_fields) == STORED_TURN_FIELDS


def _containers(value: Any) -> list[int]:
    """The ids of every list and dict in ``value``."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list | dict):
            found.append(id(item))
            stack.extend(item.values() if isinstance(item, dict) else item)
    return found


def _values(value: Any) -> list[Any]:
    """Every value in ``value``, and the keys of its dicts."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        found.append(item)
        if isinstance(item, dict):
            stack.extend([*item, *item.values()])
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _check_read_as_the_model_reads(raw: Any) -> None:
    # The model (after the walk over the whole turn) defines a stored turn; the fast
    # reading may decline any turn, but a turn it reads is one the model accepts, read the
    # same (repr tells True from 1 and 1 from 1.0, which == does not), in containers of
    # its own.
    try:
        expected = _read_turn(copy.deepcopy(raw), "turn")
    except ValueError:
        expected = None
    read = read_plain_turn(raw)
    if read is None:
        return
    assert expected is not None, f"read a turn the model refuses: {raw!r}"
    assert read == expected
    assert repr(read) == repr(expected)
    seq, turn = read
    assert type(seq) is int and type(turn.ts) is float
    assert type(turn.user_message) is str and type(turn.assistant_response) is str
    assert turn.turn_id is None or type(turn.turn_id) is str
    digest = turn.trajectory_digest
    if digest is not None:
        assert type(digest.observations_summary) is str
        assert all(type(t) is str for t in (*digest.tools_invoked, *digest.artifacts_refs))
    plain = {str, int, float, bool, type(None), list, dict}
    assert all(type(v) in plain for v in _values(turn.artifacts_shown)), "as the model's types"
    mine = [turn.artifacts_shown, turn.artifacts_hidden_refs]
    if digest is not None:
        mine += [digest.tools_invoked, digest.artifacts_refs]
    assert not set(_containers(mine)[1:]) & set(_containers(raw)), "shares a container"


@pytest.mark.parametrize(("name", "value"), ODD_STORED_FIELDS)
@pytest.mark.parametrize("drop", [False, True], ids=["changed", "changed-then-dropped"])
def test_a_stored_turn_with_one_odd_field_is_read_as_the_model_reads_it(
    name: str, value: Any, drop: bool
) -> None:
    raw = {
        "seq": 2,
        "user_message": "u",
        "assistant_response": "a",
        "trajectory_digest": None,
        "artifacts_shown": {},
        "artifacts_hidden_refs": [],
        "ts": 0.5,
        "turn_id": "t",
        name: value,
    }
    if drop:
        del raw[name]
    _check_read_as_the_model_reads(raw)


@given(_stored_turns())
@settings(max_examples=GENERATED_STORED_TURNS, deadline=None)
def test_a_stored_turn_read_without_the_model_is_what_the_model_reads(raw: Any) -> None:
    _check_read_as_the_model_reads(raw)


def test_the_common_stored_turn_is_read_without_the_model() -> None:
    # What to_dict writes for an everyday turn: the fast reading must take it (else the
    # property above holds of a reader that declines everything).
    raw = {
        "seq": 7,
        "user_message": "Grüße 🐧",
        "assistant_response": "",
        "trajectory_digest": None,
        "artifacts_shown": {},
        "artifacts_hidden_refs": [],
        "ts": 1.5,
        "turn_id": "t-1",
    }
    assert read_plain_turn(raw) == (7, ConversationTurn("Grüße 🐧", "", ts=1.5, turn_id="t-1"))
    assert read_plain_turn({"seq": 1, "user_message": "u", "assistant_response": "a"}) == (
        1,
        ConversationTurn("u", "a"),
    )
    agent = {
        **raw,
        "trajectory_digest": {
            "tools_invoked": ["search", "chart"],
            "observations_summary": "3 hits",
            "reasoning_summary": "compare, then plot",
            "artifacts_refs": ["a1"],
        },
        "artifacts_shown": {"chart": {"points": [[1, 2.5], [2, -1]], "title": "Ω", "ok": True}},
        "artifacts_hidden_refs": ["h1"],
    }
    read = read_plain_turn(agent)
    assert read is not None and read == _read_turn(agent, "turn")
    # And at the limits the model allows: the longest id, artifacts nested to the limit.
    edge = {**raw, "turn_id": "a" * MAX_TURN_ID, "artifacts_shown": _chain(MAX_DEPTH)}
    assert read_plain_turn(edge) == _read_turn(edge, "turn")
    assert (
        read[1].artifacts_shown["chart"]["points"][0]
        is not agent["artifacts_shown"]["chart"]["points"][0]
    )


@pytest.mark.requirement("HLT-007")
async def test_a_summary_that_is_not_valid_text_is_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(payload: Mapping[str, Any]) -> dict[str, str]:
        return {"summary": f"half {LONE}"}

    memory = DefaultShortTermMemory(
        config=_config(budget=MemoryBudget(full_zone_turns=0), retry_backoff_base_s=30.0),
        summarizer=broken,
    )
    with caplog.at_level(logging.WARNING, logger="reference_impl.memory"):
        await memory.add_turn(ConversationTurn("u", "a"))
        for _ in range(100):
            if memory.health is MemoryHealth.RETRY:
                break
            await asyncio.sleep(0.01)
    assert memory.health is MemoryHealth.RETRY
    assert memory.to_dict()["summary"] == ""
    assert "lone surrogate" in caplog.text
    await memory.aclose()


@pytest.mark.requirement("WM-008")
async def test_a_call_ignoring_its_cancellation_is_abandoned_at_the_timeout() -> None:
    finished = asyncio.Event()

    async def stubborn(payload: Mapping[str, Any]) -> dict[str, str]:
        try:
            while True:
                with contextlib.suppress(asyncio.CancelledError):  # ignores cancellation
                    await asyncio.sleep(10)
        finally:
            finished.set()

    memory = DefaultShortTermMemory(
        config=_config(
            budget=MemoryBudget(full_zone_turns=0), summarizer_timeout_s=0.2, retry_attempts=0
        ),
        summarizer=stubborn,
    )
    await memory.add_turn(ConversationTurn("u", "a"))
    started = time.monotonic()
    await asyncio.wait_for(memory.flush(), timeout=5)
    assert time.monotonic() - started < 2
    assert memory.health in (MemoryHealth.DEGRADED, MemoryHealth.RECOVERING)
    await asyncio.wait_for(memory.aclose(), timeout=2)
    # The abandoned call's coroutine is closed after a grace, so nothing waits on it.
    await asyncio.wait_for(finished.wait(), timeout=5)


@pytest.mark.requirement("HLT-006")
def test_no_recovery_interval_and_a_call_failing_at_once_never_freeze_the_loop() -> None:
    """The worker retries at once, forever, and every call fails before its first await:
    other tasks still get turns of the loop in between. Counted in turns, not in time, so
    that a busy machine cannot fail it; the loop runs in a thread of its own, so that a
    frozen one fails the test instead of hanging it."""
    calls = ticks = 0

    async def fails_at_once(payload: Mapping[str, Any]) -> dict[str, str]:
        nonlocal calls
        calls += 1
        raise RuntimeError("fails before its first await")

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    async def scenario() -> None:
        memory = DefaultShortTermMemory(
            config=_config(
                budget=MemoryBudget(full_zone_turns=0),
                retry_attempts=0,
                degraded_retry_interval_s=0,
            ),
            summarizer=fails_at_once,
        )
        ticker = asyncio.ensure_future(tick())
        await memory.add_turn(ConversationTurn("u", "a"))
        while calls < 200:  # noqa: ASYNC110 - polling a count the summarizer keeps
            await asyncio.sleep(0)
        ticker.cancel()
        await asyncio.wait_for(memory.aclose(), timeout=2)

    loop = threading.Thread(target=asyncio.run, args=(scenario(),), daemon=True)
    loop.start()
    deadline = time.monotonic() + 10
    while calls < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    seen_calls = calls
    seen_ticks = ticks  # read second: it only grows, and it was >= calls - 1 before
    loop.join(timeout=10)
    assert seen_calls >= 200, f"only {seen_calls} summarizer calls in 10 s"
    assert seen_ticks >= seen_calls - 1, (
        f"the event loop was held by the summarizer worker: {seen_ticks} turns of the loop "
        f"for other tasks in {seen_calls} calls"
    )
    assert not loop.is_alive()


@pytest.mark.requirement("HLT-007")
async def test_a_summarizer_that_is_not_a_coroutine_function_is_a_failure() -> None:
    def not_async(payload: Mapping[str, Any]) -> dict[str, str]:
        return {"summary": "s"}

    memory = DefaultShortTermMemory(
        config=_config(budget=MemoryBudget(full_zone_turns=0), retry_backoff_base_s=30.0),
        summarizer=not_async,  # type: ignore[arg-type]
    )
    await memory.add_turn(ConversationTurn("u", "a"))
    for _ in range(100):
        if memory.health is MemoryHealth.RETRY:
            break
        await asyncio.sleep(0.01)
    assert memory.health is MemoryHealth.RETRY
    await memory.aclose()
