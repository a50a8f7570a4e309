"""Serialization and persistence of the reference memory (groups SER, KEY-001, KEY-007).

``docs/memory-state.schema.json`` is generated from :class:`reference_impl.MemoryStateV2`;
after changing the model, regenerate it with ``python tests/reference/test_state_serialization.py``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import functools
import json
import logging
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support import blocked_summarizer, make_turn

from reference_impl import (
    ConversationTurn,
    DefaultShortTermMemory,
    KeyMismatchError,
    MemoryBudget,
    MemoryBudgetExceeded,
    MemoryHealth,
    MemoryKey,
    MemoryStateV2,
    ShortTermMemoryConfig,
    TrajectoryDigest,
    canonical_json,
    default_token_estimator,
    schema,
)
from reference_impl.store import StaleStateError

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "docs" / "memory-state.schema.json"
# Written by PenguiFlow's own memory (tests/fixtures/penguiflow_v1/make_fixtures.py).
FIXTURE_DIR = ROOT / "stm_conformance" / "data" / "penguiflow_v1"
V1_FIXTURES = sorted(p.stem for p in FIXTURE_DIR.glob("*.json"))
KEY_A = MemoryKey("acme", "alice", "s-1")
KEY_B = MemoryKey("acme", "bob", "s-1")


def generated_schema() -> dict[str, Any]:
    return MemoryStateV2.model_json_schema()


def schema_text() -> str:
    return json.dumps(generated_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# ------------------------------------------------------------------------ helpers


def config_for(strategy: str = "rolling_summary", **kwargs: Any) -> ShortTermMemoryConfig:
    budget = kwargs.pop("budget", {})
    kwargs.setdefault("retry_backoff_base_s", 3600.0)
    kwargs.setdefault("degraded_retry_interval_s", 3600.0)
    return ShortTermMemoryConfig(
        strategy=strategy,  # type: ignore[arg-type]
        budget=MemoryBudget(**{"full_zone_turns": 2, **budget}),
        **kwargs,
    )


async def failing(payload: Mapping[str, Any]) -> Mapping[str, Any]:
    raise RuntimeError("backend down")


async def joining(payload: Mapping[str, Any]) -> Mapping[str, Any]:
    text = " ".join(turn["user"] for turn in payload["turns"])
    return {"summary": f"{payload['previous_summary']} {text}".strip()}


def fresh(config: ShortTermMemoryConfig, key: MemoryKey | None = None) -> DefaultShortTermMemory:
    summarizer = blocked_summarizer if config.strategy == "rolling_summary" else None
    return DefaultShortTermMemory(config=config, summarizer=summarizer, key=key)


async def observe(memory: DefaultShortTermMemory) -> tuple[Any, ...]:
    """Everything SER-002 compares, plus the full state."""
    return (
        await memory.get_llm_context(),
        memory.health,
        memory.estimate_tokens(),
        memory.to_dict(),
    )


def view_now(memory: DefaultShortTermMemory) -> Any:
    """``await memory.get_llm_context()`` from synchronous code (the call never suspends)."""
    coroutine = memory.get_llm_context()
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise AssertionError("get_llm_context() suspended")


def observe_sync(memory: DefaultShortTermMemory) -> tuple[Any, ...]:
    return (view_now(memory), memory.health, memory.estimate_tokens(), memory.to_dict())


class Switchable:
    """A summarizer that delegates to ``target``; tests switch it to change behaviour."""

    def __init__(self, target: Any) -> None:
        self.target = target

    async def __call__(self, payload: Mapping[str, Any]) -> Mapping[str, Any]:
        result: Mapping[str, Any] = await self.target(payload)
        return result


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


DIGEST = TrajectoryDigest(["search", "日本"], "obs: ok", "because", ["artifact://x"])

STATE_KINDS = [
    "empty",
    "pending-hidden",
    "summary-and-pending",
    "retry",
    "degraded-backlog",
    "truncation-digest",
    "none",
    "unicode",
    "departed-ids",
]


async def build(kind: str) -> tuple[ShortTermMemoryConfig, DefaultShortTermMemory]:
    """A memory in an interesting state, and its configuration."""
    if kind == "empty":
        config = config_for()
        return config, DefaultShortTermMemory(
            config=config, summarizer=blocked_summarizer, key=KEY_A
        )
    if kind == "pending-hidden":
        config = config_for(budget={"total_max_tokens": 40, "summary_max_tokens": 10})
        memory = DefaultShortTermMemory(config=config, summarizer=blocked_summarizer, key=KEY_A)
        for index in range(8):
            await memory.add_turn(make_turn(index))
        return config, memory
    if kind == "summary-and-pending":
        config = config_for()
        summarizer = Switchable(joining)
        memory = DefaultShortTermMemory(config=config, summarizer=summarizer, key=KEY_A)
        for index in range(4):
            await memory.add_turn(make_turn(index, trajectory_digest=DIGEST))
        await memory.flush()
        summarizer.target = blocked_summarizer
        await memory.add_turn(make_turn(4))
        await memory.add_turn(make_turn(5))
        await settle()
        return config, memory
    if kind == "retry":
        config = config_for(retry_attempts=3)
        memory = DefaultShortTermMemory(config=config, summarizer=failing, key=KEY_A)
        for index in range(4):
            await memory.add_turn(make_turn(index))
        await settle()
        assert memory.health is MemoryHealth.RETRY
        return config, memory
    if kind == "degraded-backlog":
        config = config_for(retry_attempts=0, recovery_backlog_limit=2)
        memory = DefaultShortTermMemory(config=config, summarizer=failing, key=KEY_A)
        for index in range(3):
            await memory.add_turn(make_turn(index))
        await memory.flush()
        for index in range(3, 7):
            await memory.add_turn(make_turn(index))
        assert memory.health is MemoryHealth.DEGRADED and memory.dropped_turns > 0
        return config, memory
    if kind == "truncation-digest":
        config = config_for("truncation", include_trajectory_digest=True)
        memory = DefaultShortTermMemory(config=config, key=KEY_A)
        for index in range(4):
            await memory.add_turn(
                make_turn(index, trajectory_digest=DIGEST, artifacts_shown={"n": [index, 1.5]})
            )
        return config, memory
    if kind == "departed-ids":
        # More turns with ids left the window than the state remembers (DEPARTED_IDS).
        config = config_for("truncation", budget={"full_zone_turns": 2})
        memory = DefaultShortTermMemory(config=config, key=KEY_A)
        for index in range(70):
            await memory.add_turn(make_turn(index, turn_id=f"tour-é-{index}"))
        assert memory.to_dict()["departed_turn_ids"] == [f"tour-é-{i}" for i in range(4, 68)]
        return config, memory
    if kind == "none":
        config = config_for("none")
        memory = DefaultShortTermMemory(config=config)
        await memory.add_turn(make_turn(0))
        return config, memory
    assert kind == "unicode"
    config = config_for(budget={"full_zone_turns": 1})
    memory = DefaultShortTermMemory(
        config=config, summarizer=joining, key=MemoryKey("é:%", "🐧", "s")
    )
    await memory.add_turn(ConversationTurn('Zoë 👨‍👩‍👧 \u2028 "q" \\', "東京 ☀️\n\r\t"))
    await memory.add_turn(ConversationTurn("مرحبا", "שלום", ts=1.5))
    await memory.flush()
    await memory.add_turn(ConversationTurn("∑ x² ≤ ∞", "<|endoftext|>"))
    await settle()
    return config, memory


# ------------------------------------------------------------------------ SER-001


@pytest.mark.requirement("SER-001")
def test_committed_schema_is_generated_from_the_model() -> None:
    assert SCHEMA_PATH.exists(), "run: python tests/reference/test_state_serialization.py"
    committed = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert json.dumps(committed, sort_keys=True) == json.dumps(generated_schema(), sort_keys=True)


@pytest.mark.anyio
@pytest.mark.requirement("SER-001")
@pytest.mark.parametrize("kind", STATE_KINDS)
async def test_to_dict_is_json_and_validates_against_the_schema(kind: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    _config, memory = await build(kind)
    state = memory.to_dict()
    assert json.loads(json.dumps(state, allow_nan=False)) == state
    assert isinstance(state["version"], int) and state["version"] == 2
    MemoryStateV2.model_validate(state)
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.validate(state, schema)
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("SER-001")
@pytest.mark.parametrize("kind", STATE_KINDS)
async def test_dump_json_is_the_compact_text_of_dump(kind: str) -> None:
    """The hand-built text the stores write is exactly ``dump()`` encoded, field order kept."""
    state_json = pytest.importorskip("stm_redis.state_json")  # the Redis backend writes it
    config, memory = await build(kind)
    state = memory._state
    expected = json.dumps(schema.dump(state, config), ensure_ascii=False, separators=(",", ":"))
    assert state_json.dump_json(state, config) == expected
    cached = state_json.dump_json(
        state, config, state_json.turn_json, config_text=state_json.config_json(config)
    )
    assert cached == expected
    await memory.aclose()


# ------------------------------------------------------------------------ SER-002


@pytest.mark.anyio
@pytest.mark.requirement("SER-002", "BUD-010")
@pytest.mark.parametrize("kind", STATE_KINDS)
async def test_round_trip_into_a_fresh_memory_is_observably_identical(kind: str) -> None:
    config, memory = await build(kind)
    state = memory.to_dict()
    restored = fresh(config)
    restored.from_dict(json.loads(json.dumps(state)))
    assert observe_sync(restored) == observe_sync(memory)
    assert restored.key == memory.key
    await memory.aclose()
    await restored.aclose()


# ------------------------------------------------------------------------ SER-003

_json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_json = st.recursive(
    _json_leaf,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)
_state_like = st.fixed_dictionaries(
    {"version": st.sampled_from([1, 2, 2.0, True, "2", None, 3])},
    optional={
        name: _json
        for name in (
            "health",
            "summary",
            "turns",
            "pending",
            "backlog",
            "strategy",
            "spec_version",
            "failures",
            "next_seq",
            "summarized_through",
            "dropped_turns",
            "revision",
            "key",
            "config_snapshot",
        )
    },
)


@functools.cache
def valid_states() -> dict[str, tuple[ShortTermMemoryConfig, dict[str, Any]]]:
    async def make() -> dict[str, tuple[ShortTermMemoryConfig, dict[str, Any]]]:
        states = {}
        for kind in (
            "summary-and-pending",
            "degraded-backlog",
            "truncation-digest",
            "pending-hidden",
        ):
            config, memory = await build(kind)
            states[kind] = (config, memory.to_dict())
            await memory.aclose()
        return states

    # In a thread of its own: callers may already be running an event loop.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, make()).result()


def loaded_memory(kind: str, *, sentinel: bool = False) -> DefaultShortTermMemory:
    """A memory (outside any event loop) holding the valid state ``kind``.

    With ``sentinel``, the state is reduced to one recognisable turn (and summary), so that
    a half-loaded state could not pass for the one held before.
    """
    config, state = valid_states()[kind]
    state = copy.deepcopy(state)
    if sentinel:
        last = {**state["turns"][-1], "user_message": "sentinel"}
        state.update(turns=[last], pending=[], backlog=[])
        if config.strategy == "rolling_summary":
            state["summary"] = "sentinel summary"
    memory = fresh(config, key=KEY_A)
    memory.from_dict(state)
    return memory


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*prefix, index)
            yield from paths(item, (*prefix, index))


@st.composite
def mutated_states(draw: st.DrawFn) -> tuple[str, Any]:
    kind = draw(st.sampled_from(sorted(valid_states())))
    state = copy.deepcopy(valid_states()[kind][1])
    if draw(st.booleans()):  # the same, in PenguiFlow's v1 format
        state = {
            name: state[name] for name in ("health", "summary", "turns", "pending", "backlog")
        } | {
            "version": 1,
            "config_snapshot": state["config_snapshot"],
        }
    path = draw(st.sampled_from(list(paths(state))))
    parent = functools.reduce(lambda node, part: node[part], path[:-1], state)
    action = draw(st.sampled_from(["delete", "replace", "retype", "duplicate"]))
    if action == "delete":
        del parent[path[-1]]
    elif action == "replace":
        parent[path[-1]] = draw(_json)
    elif action == "retype":
        current = parent[path[-1]]
        candidates: list[Any] = [None, True, -1, 2**70, 1.5, "x", [], {}]
        others = [v for v in candidates if type(v) is not type(current)]
        parent[path[-1]] = draw(st.sampled_from(others))
    elif isinstance(parent, list):
        parent.insert(path[-1], copy.deepcopy(parent[path[-1]]))
    else:
        parent[path[-1]] = copy.deepcopy(state)
    return kind, state


def afrom_dict_outcome(memory: DefaultShortTermMemory, data: Any) -> str | None:
    """``await memory.afrom_dict(data)`` from synchronous code (it only ever yields to let
    others run): the error's text, or ``None``. No loop runs, so no worker starts."""
    coroutine = memory.afrom_dict(data)
    try:
        while True:
            coroutine.send(None)
    except StopIteration:
        return None
    except ValueError as exc:
        return f"{type(exc).__name__}: {exc}"


def assert_loads_or_raises_value_error_untouched(
    memory: DefaultShortTermMemory, data: Any, twin: DefaultShortTermMemory
) -> None:
    """``from_dict(data)`` into ``memory``; ``afrom_dict(data)`` into ``twin``, a memory
    holding the same state, must end the same way."""
    before = observe_sync(memory)
    twin_outcome = afrom_dict_outcome(twin, data)
    try:
        memory.from_dict(data)
    except ValueError as exc:
        event("refused")
        assert observe_sync(memory) == before  # SER-003: nothing half-loaded
        assert twin_outcome == f"{type(exc).__name__}: {exc}"
        assert observe_sync(twin) == before
        return
    assert twin_outcome is None
    assert observe_sync(twin) == observe_sync(memory)
    event("accepted")
    # Accepted: the loaded memory must be a consistent one.
    view = view_now(memory)
    assert memory.estimate_tokens() == default_token_estimator(canonical_json(view))
    state = memory.to_dict()
    MemoryStateV2.model_validate(state)
    again = fresh(memory.config)
    again.from_dict(state)
    assert observe_sync(again) == observe_sync(memory)


@pytest.mark.requirement("SER-003")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(_json, _state_like))
def test_random_json_loads_or_raises_only_value_error(data: Any) -> None:
    memory = loaded_memory("summary-and-pending", sentinel=True)
    twin = loaded_memory("summary-and-pending", sentinel=True)
    assert_loads_or_raises_value_error_untouched(memory, data, twin)


@pytest.mark.requirement("SER-003")
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutated_states())
def test_state_with_one_field_mutated_loads_or_raises_only_value_error(
    case: tuple[str, Any],
) -> None:
    kind, data = case
    memory, twin = loaded_memory(kind, sentinel=True), loaded_memory(kind, sentinel=True)
    assert_loads_or_raises_value_error_untouched(memory, data, twin)


class _HostileMapping(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("hostile")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("hostile")

    def __len__(self) -> int:
        return 3


@pytest.mark.requirement("SER-003")
@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        "state",
        b"{}",
        {},
        {"version": 3},
        {"version": "2"},
        _HostileMapping(),
        {"version": 2, "turns": _HostileMapping()},
    ],
    ids=[
        "none",
        "list",
        "str",
        "bytes",
        "empty",
        "version-3",
        "version-str",
        "hostile",
        "hostile-turns",
    ],
)
def test_malformed_inputs_raise_value_error(data: Any) -> None:
    memory = loaded_memory("summary-and-pending")
    before = observe_sync(memory)
    with pytest.raises(ValueError):
        memory.from_dict(data)
    assert observe_sync(memory) == before
    with pytest.raises(ValueError):
        asyncio.run(memory.afrom_dict(data))
    assert observe_sync(memory) == before


def _with(kind: str, **changes: Any) -> dict[str, Any]:
    state = copy.deepcopy(valid_states()[kind][1])
    state.update(changes)
    return state


@pytest.mark.requirement("SER-003")
@pytest.mark.parametrize(
    "case",
    [
        "seq-order",
        "seq-duplicate",
        "at-watermark",
        "next-seq-too-small",
        "watermark-ahead-of-next-seq",
        "strategy-mismatch",
        "ts-nan",
        "deep-nesting",
        "extra-field",
    ],
)
def test_inconsistent_states_raise_value_error(case: str) -> None:
    kind = "summary-and-pending"
    state = copy.deepcopy(valid_states()[kind][1])
    if case == "seq-order":
        state["turns"].reverse()
    elif case == "seq-duplicate":
        state["turns"][0]["seq"] = state["pending"][-1]["seq"]
    elif case == "at-watermark":
        state["summarized_through"] = state["pending"][0]["seq"]
    elif case == "next-seq-too-small":
        state["next_seq"] = state["turns"][-1]["seq"]
    elif case == "watermark-ahead-of-next-seq":
        # No turn left to check against, but new turns would be numbered below the watermark.
        state.update(turns=[], pending=[], backlog=[], summarized_through=50, next_seq=3)
    elif case == "strategy-mismatch":
        state["strategy"] = "truncation"
    elif case == "ts-nan":
        state["turns"][0]["ts"] = float("nan")
    elif case == "deep-nesting":
        deep: list[Any] = []
        for _ in range(3000):
            deep = [deep]
        state["turns"][0]["artifacts_shown"] = {"x": deep}
    else:
        state["unexpected"] = 1
    memory = loaded_memory(kind)
    before = observe_sync(memory)
    with pytest.raises(ValueError):
        memory.from_dict(state)
    assert observe_sync(memory) == before
    with pytest.raises(ValueError):
        asyncio.run(memory.afrom_dict(state))
    assert observe_sync(memory) == before


async def many_pending_turns(count: int) -> tuple[ShortTermMemoryConfig, dict[str, Any]]:
    """A state with ``count`` pending turns (its summarizer never answers)."""
    config = config_for()
    memory = DefaultShortTermMemory(config=config, summarizer=blocked_summarizer, key=KEY_A)
    for i in range(count + 2):
        await memory.add_turn(ConversationTurn(user_message=f"ü{i}", assistant_response=f"a{i}"))
    state = memory.to_dict()
    await memory.aclose()
    assert len(state["pending"]) == count
    return config, state


class Ticker:
    """A task counting how often the event loop let it run."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(0)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def afrom_dict_beside_from_dict(
    config: ShortTermMemoryConfig, state: dict[str, Any]
) -> tuple[DefaultShortTermMemory, int, dict[str, Any]]:
    """A memory loaded with ``afrom_dict(state)``, how often another task ran meanwhile,
    and its ``to_dict()`` just after; asserts that it observes as one loaded with
    ``from_dict`` does."""
    memory = DefaultShortTermMemory(config=config, summarizer=joining, key=KEY_A)
    ticker = Ticker()
    await asyncio.sleep(0)
    before = ticker.ticks
    await memory.afrom_dict(state)
    ticks = ticker.ticks - before
    await ticker.stop()
    other = DefaultShortTermMemory(config=config, summarizer=joining, key=KEY_A)
    other.from_dict(state)
    assert observe_sync(memory) == observe_sync(other)
    loaded = memory.to_dict()  # before its summarizer can run
    await other.aclose()
    return memory, ticks, loaded


@pytest.mark.anyio
@pytest.mark.requirement("SER-002")
async def test_afrom_dict_lets_other_tasks_run_and_loads_what_from_dict_loads() -> None:
    config, state = await many_pending_turns(1000)
    memory, ticks, loaded = await afrom_dict_beside_from_dict(config, state)
    # Reading and building 1,000 turns, a step of STEP_TURNS at a time.
    assert ticks >= 1000 // schema.STEP_TURNS
    assert loaded == state
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("SER-004")
async def test_afrom_dict_of_a_large_penguiflow_state_lets_other_tasks_run() -> None:
    config, state = await many_pending_turns(1000)
    v1 = {name: state[name] for name in ("summary", "turns", "pending", "backlog")} | {
        "version": 1,
        "health": "healthy",
        "config_snapshot": state["config_snapshot"],
    }
    memory, ticks, loaded = await afrom_dict_beside_from_dict(config, v1)
    # Validated in one step, then its turns built a step of STEP_TURNS at a time.
    assert ticks >= 1000 // schema.STEP_TURNS
    assert [t["user_message"] for t in loaded["pending"]] == [
        t["user_message"] for t in state["pending"]
    ]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("SER-003")
async def test_afrom_dict_refusing_a_late_turn_changes_nothing_meanwhile() -> None:
    """A bad turn found after other tasks ran: the memory is as it was, including what
    those tasks did to it meanwhile."""
    config, state = await many_pending_turns(1000)
    bad = copy.deepcopy(state)
    bad["pending"][-1]["user_message"] = "\ud800"
    memory = DefaultShortTermMemory(config=config, summarizer=blocked_summarizer, key=KEY_A)
    ticker = Ticker()

    async def add_meanwhile() -> None:
        await asyncio.sleep(0)
        await memory.add_turn(ConversationTurn(user_message="meanwhile", assistant_response="kept"))

    adding = asyncio.create_task(add_meanwhile())
    with pytest.raises(
        ValueError, match=r"state\.pending\[999\]\['user_message'\]: lone surrogate"
    ):
        await memory.afrom_dict(bad)
    await adding
    assert ticker.ticks > 1000 // schema.STEP_TURNS  # refused late, after yielding
    await ticker.stop()
    view = await memory.get_llm_context()
    assert [t["user"] for t in view["conversation_memory"]["recent_turns"]] == ["meanwhile"]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("SER-005")
async def test_hydrate_loads_in_steps() -> None:
    config, state = await many_pending_turns(600)

    class Store:
        async def load_memory_state(self, key: str) -> Mapping[str, Any]:
            return state | {"storage_key": key}

    store = Store()
    memory = DefaultShortTermMemory(config=config, summarizer=joining, key=KEY_A)
    ticker = Ticker()
    await asyncio.sleep(0)
    before = ticker.ticks
    await memory.hydrate(store, "k")
    assert ticker.ticks - before >= 600 // schema.STEP_TURNS
    await ticker.stop()
    assert memory.to_dict()["pending"] == state["pending"]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("WM-007", "SER-003")
async def test_loaded_watermark_never_covers_new_turns() -> None:
    """A state whose watermark is ahead of its numbering would let flush skip new turns."""
    config = config_for(budget={"full_zone_turns": 1})
    memory = DefaultShortTermMemory(config=config, summarizer=joining)
    state = memory.to_dict()
    state.update(summarized_through=100, next_seq=1)
    with pytest.raises(ValueError):
        memory.from_dict(state)
    for index in range(3):
        await memory.add_turn(make_turn(index))
    await asyncio.wait_for(memory.flush(), timeout=5)
    assert memory.to_dict()["pending"] == []
    assert memory.to_dict()["summary"] == "u0 u1"
    await memory.aclose()


# ------------------------------------------------------------------------ SER-004


def load_fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURE_DIR / f"{name}.json").read_text(encoding="utf-8"))
    return data


def config_from_snapshot(snapshot: Mapping[str, Any]) -> ShortTermMemoryConfig:
    return ShortTermMemoryConfig(
        strategy=snapshot["strategy"],
        budget=MemoryBudget(**snapshot["budget"]),
        include_trajectory_digest=snapshot["include_trajectory_digest"],
        recovery_backlog_limit=snapshot["recovery_backlog_limit"],
        retry_attempts=snapshot["retry_attempts"],
        retry_backoff_base_s=3600.0,
        degraded_retry_interval_s=3600.0,
    )


def render_v1(turn: Mapping[str, Any]) -> dict[str, Any]:
    rendered = {"user": turn["user_message"], "assistant": turn["assistant_response"]}
    if turn["trajectory_digest"] is not None:
        rendered["trajectory_digest"] = turn["trajectory_digest"]
    return rendered


def expected_view(state: Mapping[str, Any]) -> dict[str, Any]:
    """The view section 0 of the spec assigns to a state (no budget trimming needed here)."""
    strategy = state["config_snapshot"]["strategy"]
    if strategy == "none":
        return {}
    view: dict[str, Any] = {"recent_turns": [render_v1(t) for t in state["turns"]]}
    if strategy == "rolling_summary" and state["health"] in ("healthy", "retry"):
        if state["pending"]:
            view["pending_turns"] = [render_v1(t) for t in state["pending"]]
        if state["summary"]:
            view["summary"] = state["summary"]
    return {"conversation_memory": view}


@pytest.mark.requirement("SER-004")
def test_all_penguiflow_fixtures_are_found() -> None:
    assert len(V1_FIXTURES) >= 8, f"no PenguiFlow v1 fixtures in {FIXTURE_DIR}"


@pytest.mark.requirement("SER-004")
@pytest.mark.parametrize("name", V1_FIXTURES)
def test_penguiflow_v1_state_loads_with_the_expected_view(name: str) -> None:
    data = load_fixture(name)
    assert data["version"] == 1
    memory = fresh(config_from_snapshot(data["config_snapshot"]))
    memory.from_dict(data)
    assert view_now(memory) == expected_view(data)
    assert memory.health.value == data["health"]
    assert memory.estimate_tokens() == default_token_estimator(canonical_json(view_now(memory)))
    state = memory.to_dict()
    assert state["version"] == 2
    MemoryStateV2.model_validate(state)
    # Turns are numbered oldest first: backlog, pending, then recent.
    numbered = [t["user_message"] for name in ("backlog", "pending", "turns") for t in state[name]]
    original = [t["user_message"] for name in ("backlog", "pending", "turns") for t in data[name]]
    assert numbered == original
    seqs = [t["seq"] for name in ("backlog", "pending", "turns") for t in state[name]]
    assert seqs == list(range(1, len(seqs) + 1))
    for name in ("turns", "pending", "backlog"):
        for before, after in zip(data[name], state[name], strict=True):
            assert {k: v for k, v in after.items() if k != "seq"} == before


@pytest.mark.requirement("SER-004")
def test_penguiflow_v1_health_and_backlog_are_kept() -> None:
    degraded = fresh(
        config_from_snapshot(load_fixture("rolling_summary_degraded")["config_snapshot"])
    )
    degraded.from_dict(load_fixture("rolling_summary_degraded"))
    assert degraded.health is MemoryHealth.DEGRADED
    assert [t["user_message"] for t in degraded.to_dict()["backlog"]] == [
        "And the invoice?",
        "Cancel order A-1002 please.",
        "Thanks, that's all.",
    ]
    retry = fresh(config_from_snapshot(load_fixture("rolling_summary_retry")["config_snapshot"]))
    retry.from_dict(load_fixture("rolling_summary_retry"))
    assert retry.health is MemoryHealth.RETRY
    assert retry.to_dict()["failures"] == 1


@pytest.mark.requirement("SER-004", "BUD-003")
def test_penguiflow_v1_state_loads_into_a_smaller_window() -> None:
    data = load_fixture("rolling_summary_pending")  # written with full_zone_turns=2
    memory = fresh(config_for(budget={"full_zone_turns": 1}))
    memory.from_dict(data)
    view = view_now(memory)["conversation_memory"]
    assert [t["user"] for t in view["recent_turns"]] == ["Thanks, that's all."]
    assert [t["user"] for t in view["pending_turns"]] == [
        "Can you change the delivery address?",
        "And the invoice?",
        "Cancel order A-1002 please.",
    ]


@pytest.mark.requirement("SER-004", "SER-003")
def test_penguiflow_v1_state_of_another_strategy_is_refused() -> None:
    memory = fresh(config_for())
    before = observe_sync(memory)
    with pytest.raises(ValueError):
        memory.from_dict(load_fixture("truncation_with_digest"))
    assert observe_sync(memory) == before


@pytest.mark.anyio
@pytest.mark.requirement("SER-004", "WM-004")
async def test_loaded_penguiflow_pending_turns_are_summarized_onto_its_summary() -> None:
    data = load_fixture("rolling_summary_pending")
    payloads: list[dict[str, Any]] = []

    async def summarize(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        payloads.append(dict(payload))
        return {"summary": "merged"}

    config = config_from_snapshot(data["config_snapshot"])
    memory = DefaultShortTermMemory(config=config, summarizer=summarize)
    memory.from_dict(data)
    await asyncio.wait_for(memory.flush(), timeout=5)
    assert payloads == [
        {"previous_summary": data["summary"], "turns": [render_v1(t) for t in data["pending"]]}
    ]
    assert memory.to_dict()["summary"] == "merged"
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("SER-003", "HLT-006")
async def test_loading_a_state_restarts_the_timers_of_the_replaced_one() -> None:
    """A worker asleep on the old state's recovery timer must not delay the loaded state."""
    config = config_for(retry_attempts=0)  # recovery interval: one hour
    summarizer = Switchable(failing)
    memory = DefaultShortTermMemory(config=config, summarizer=summarizer)
    for index in range(4):
        await memory.add_turn(make_turn(index))
    await memory.flush()
    assert memory.health is MemoryHealth.DEGRADED
    await settle()  # the worker is asleep until the recovery attempt
    summarizer.target = joining
    healthy_with_pending = _with("summary-and-pending", key=None)
    assert healthy_with_pending["health"] == "healthy" and healthy_with_pending["pending"]
    memory.from_dict(healthy_with_pending)
    await asyncio.wait_for(memory.flush(), timeout=5)
    assert memory.to_dict()["pending"] == []
    await memory.aclose()


# ------------------------------------------------------------------------ KEY-007


@pytest.mark.anyio
@pytest.mark.requirement("KEY-007")
async def test_state_of_another_key_is_refused_by_from_dict() -> None:
    config, source = await build("summary-and-pending")  # key A
    other = fresh(config, key=KEY_B)
    await other.add_turn(make_turn(99))
    before = await observe(other)
    with pytest.raises(KeyMismatchError):
        other.from_dict(source.to_dict())
    assert issubclass(KeyMismatchError, ValueError)
    assert await observe(other) == before
    await source.aclose()
    await other.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("KEY-007")
async def test_keyless_memory_adopts_the_key_of_the_state_it_loads() -> None:
    config, source = await build("summary-and-pending")
    keyless = fresh(config)
    keyless.from_dict(source.to_dict())
    assert keyless.key == KEY_A
    assert keyless.to_dict()["key"] == KEY_A.as_dict()
    with pytest.raises(KeyMismatchError):
        keyless.from_dict(_with("summary-and-pending", key=KEY_B.as_dict()))
    await source.aclose()
    await keyless.aclose()


# ------------------------------------------------------------------------ stores


class RecordingStore:
    """A minimal store of JSON copies that records what the memory asked of it."""

    def __init__(self) -> None:
        self.records: dict[str, str] = {}
        self.calls: list[tuple[Any, ...]] = []

    async def save_memory_state(self, key: str, state: Mapping[str, Any]) -> None:
        self.calls.append(("save", key, state["revision"]))
        self.records[key] = json.dumps(state)

    async def load_memory_state(self, key: str) -> dict[str, Any] | None:
        self.calls.append(("load", key))
        text = self.records.get(key)
        return None if text is None else json.loads(text)


class ConditionalStore(RecordingStore):
    async def save_memory_state_if(
        self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
    ) -> None:
        self.calls.append(("save_if", key, state["revision"], expected_revision))
        text = self.records.get(key)
        actual = None if text is None else json.loads(text)["revision"]
        if actual != expected_revision:
            raise StaleStateError(key, expected=expected_revision, actual=actual)
        self.records[key] = json.dumps(state)


@pytest.mark.anyio
@pytest.mark.requirement("SER-005", "SER-002")
@pytest.mark.parametrize("kind", ["summary-and-pending", "degraded-backlog", "truncation-digest"])
async def test_persist_then_hydrate_into_a_fresh_memory(kind: str) -> None:
    config, memory = await build(kind)
    store = RecordingStore()
    await memory.persist(store, KEY_A.composite())
    restored = fresh(config)
    await restored.hydrate(store, KEY_A.composite())
    assert store.calls == [("save", KEY_A.composite(), 1), ("load", KEY_A.composite())]
    assert observe_sync(restored)[:3] == observe_sync(memory)[:3]
    assert restored.to_dict() == memory.to_dict()
    await memory.aclose()
    await restored.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("SER-005")
async def test_hydrating_an_absent_key_changes_nothing() -> None:
    _config, memory = await build("summary-and-pending")
    before = await observe(memory)
    store = RecordingStore()
    await memory.hydrate(store, "nobody:here:0")
    assert await observe(memory) == before
    await memory.hydrate(object(), KEY_A.composite())  # not a store: ignored
    await memory.persist(object(), KEY_A.composite())
    assert await observe(memory) == before
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("SER-006")
async def test_each_persist_carries_the_next_revision() -> None:
    config, memory = await build("summary-and-pending")
    store = RecordingStore()
    await memory.persist(store, "k")
    await memory.persist(store, "k")
    restored = fresh(config)
    await restored.hydrate(store, "k")
    assert restored.to_dict()["revision"] == 2
    await restored.persist(store, "k")
    assert [call[2] for call in store.calls if call[0] == "save"] == [1, 2, 3]
    await memory.aclose()
    await restored.aclose()


class LandsAfterCancelStore(ConditionalStore):
    """Its write lands after its caller was cancelled, as SQLite's worker thread does."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = asyncio.Event()

    async def save_memory_state_if(
        self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
    ) -> None:
        async def write() -> None:
            self.writing.set()
            await asyncio.sleep(0.02)
            await ConditionalStore.save_memory_state_if(
                self, key, state, expected_revision=expected_revision
            )

        await asyncio.shield(asyncio.ensure_future(write()))


@pytest.mark.anyio
@pytest.mark.requirement("SER-006")
async def test_a_persist_cancelled_while_its_write_lands_keeps_the_revision_in_step() -> None:
    _, memory = await build("summary-and-pending")
    store = LandsAfterCancelStore()
    task = asyncio.ensure_future(memory.persist(store, "k"))
    await store.writing.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline = time.monotonic() + 5
    while memory.to_dict()["revision"] != 1:  # the write lands, and the memory counts it
        assert time.monotonic() < deadline, "the landed write's revision was never counted"
        await asyncio.sleep(0.01)
    await memory.persist(store, "k")  # expects revision 1: not stale
    assert [c[2:] for c in store.calls if c[0] == "save_if"] == [(1, None), (2, 1)]
    await memory.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("SER-006")
async def test_conditional_save_is_used_and_refuses_a_stale_writer() -> None:
    config, first = await build("summary-and-pending")
    store = ConditionalStore()
    await first.persist(store, "k")
    second = fresh(config)
    await second.hydrate(store, "k")
    await first.persist(store, "k")  # revision 2; second still holds revision 1
    with pytest.raises(StaleStateError):
        await second.persist(store, "k")
    assert second.to_dict()["revision"] == 1  # unchanged by the refused write
    assert [c for c in store.calls if c[0] != "load"] == [
        ("save_if", "k", 1, None),
        ("save_if", "k", 2, 1),
        ("save_if", "k", 2, 1),
    ]
    await first.aclose()
    await second.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("SER-005", "SER-006")
async def test_round_trip_through_the_in_memory_state_store() -> None:
    stores = pytest.importorskip("stm_stores")
    config, memory = await build("summary-and-pending")
    store = stores.InMemoryStateStore()
    await memory.persist(store, KEY_A.composite())
    await memory.persist(store, KEY_A.composite())
    restored = fresh(config)
    await restored.hydrate(store, KEY_A.composite())
    assert observe_sync(restored) == observe_sync(memory)
    assert restored.to_dict()["revision"] == 2
    await memory.aclose()
    await restored.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("KEY-007")
async def test_hydrate_refuses_a_record_saved_under_another_storage_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config, source = await build("summary-and-pending")
    store = RecordingStore()
    await source.persist(store, "other")
    store.records["mine"] = store.records["other"]  # a mis-routed record
    target = fresh(config)
    before = await observe(target)
    with caplog.at_level(logging.WARNING, logger="reference_impl.memory"):
        await target.hydrate(store, "mine")
    assert await observe(target) == before
    assert "refusing to hydrate" in caplog.text
    await source.aclose()
    await target.aclose()


@pytest.mark.anyio
@pytest.mark.requirement("KEY-001", "KEY-007")
async def test_keys_sharing_one_store_never_see_each_other(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = config_for("truncation")
    store = RecordingStore()
    alice = DefaultShortTermMemory(config=config, key=KEY_A)
    bob = DefaultShortTermMemory(config=config, key=KEY_B)
    await alice.add_turn(ConversationTurn("alice's secret", "ok"))
    await bob.add_turn(ConversationTurn("bob's question", "ok"))
    await alice.persist(store, KEY_A.composite())
    await bob.persist(store, KEY_B.composite())

    for key, expected in ((KEY_A, "alice's secret"), (KEY_B, "bob's question")):
        memory = DefaultShortTermMemory(config=config, key=key)
        await memory.hydrate(store, key.composite())
        assert [t["user"] for t in view_now(memory)["conversation_memory"]["recent_turns"]] == [
            expected
        ]

    # Bob's memory asked for Alice's record: refused, with a warning, and nothing changes.
    snooping = DefaultShortTermMemory(config=config, key=KEY_B)
    with caplog.at_level(logging.WARNING, logger="reference_impl.memory"):
        await snooping.hydrate(store, KEY_A.composite())
    assert view_now(snooping) == {"conversation_memory": {"recent_turns": []}}
    assert "refusing to hydrate" in caplog.text


if __name__ == "__main__":
    SCHEMA_PATH.write_text(schema_text(), encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")


# -- states the reference never writes: normalised on load ---------------------------------


async def _state_with_pending(n: int = 4) -> dict[str, Any]:
    """A HEALTHY state with pending turns (the summarizer never answers)."""
    memory = DefaultShortTermMemory(
        config=config_for(budget={"full_zone_turns": 1, "total_max_tokens": 0}),
        key=KEY_A,
        summarizer=blocked_summarizer,
    )
    for i in range(n):
        await memory.add_turn(make_turn(i))
    state = json.loads(json.dumps(memory.to_dict()))
    await memory.aclose()
    assert [t["user_message"] for t in state["pending"]] == [f"u{i}" for i in range(n - 1)]
    return state


@pytest.mark.anyio
async def test_a_backlog_outside_degraded_loads_as_the_oldest_pending_turns() -> None:
    """Another writer's HEALTHY state with a backlog: the backlog turns become the oldest
    pending turns, nothing is lost."""
    state = await _state_with_pending()
    state["backlog"], state["pending"] = state["pending"][:2], state["pending"][2:]
    memory = fresh(config_for(budget={"full_zone_turns": 1, "total_max_tokens": 0}))
    memory.from_dict(state)
    view = (await memory.get_llm_context())["conversation_memory"]
    assert [t["user"] for t in view["pending_turns"]] == ["u0", "u1", "u2"]
    assert memory.to_dict()["backlog"] == []


@pytest.mark.anyio
async def test_pending_turns_in_a_degraded_state_load_into_the_backlog() -> None:
    """Another writer's DEGRADED state with pending turns: they move to the backlog
    (HLT-004), bounded by the configured limit and counted when dropped (HLT-005)."""
    state = await _state_with_pending()
    state.update(health="degraded", failures=1)
    config = config_for(
        budget={"full_zone_turns": 1, "total_max_tokens": 0}, recovery_backlog_limit=2
    )
    memory = DefaultShortTermMemory(config=config, key=KEY_A, summarizer=blocked_summarizer)
    memory.from_dict(state)
    loaded = memory.to_dict()
    assert loaded["pending"] == []
    assert [t["user_message"] for t in loaded["backlog"]] == ["u1", "u2"]
    assert loaded["dropped_turns"] == 1
    await memory.aclose()


class _NotAMappingStore:
    async def load_memory_state(self, key: str) -> Any:
        return ["not", "a", "state"]

    async def save_memory_state(self, key: str, state: Any) -> None:
        raise AssertionError("not called")


@pytest.mark.anyio
async def test_hydrate_from_a_record_that_is_not_a_mapping_is_a_value_error() -> None:
    """A corrupt record gets from_dict's typed error (SER-003) and changes nothing."""
    memory = fresh(config_for())
    await memory.add_turn(make_turn(0))
    before = memory.to_dict()
    with pytest.raises(ValueError, match="must be a mapping"):
        await memory.hydrate(_NotAMappingStore(), "acme:alice:s-1")
    assert memory.to_dict() == before


class KeepingStore(RecordingStore):
    """Keeps the state objects it was given, to see what a later persist shares."""

    def __init__(self) -> None:
        super().__init__()
        self.given: list[Mapping[str, Any]] = []

    async def save_memory_state(self, key: str, state: Mapping[str, Any]) -> None:
        self.given.append(state)
        await super().save_memory_state(key, state)


@pytest.mark.anyio
async def test_persist_gives_a_store_the_same_dict_for_a_turn_it_gave_before() -> None:
    config = config_for()
    memory = DefaultShortTermMemory(config=config, summarizer=blocked_summarizer, key=KEY_A)
    for index in range(3):
        await memory.add_turn(make_turn(index, trajectory_digest=DIGEST))
    store = KeepingStore()
    await memory.persist(store, "k")
    await memory.add_turn(make_turn(3))
    await memory.persist(store, "k")
    first, second = store.given
    before = {t["seq"]: t for part in ("turns", "pending") for t in first[part]}
    after = {t["seq"]: t for part in ("turns", "pending") for t in second[part]}
    assert set(after) == set(before) | {4}
    assert all(after[seq] is before[seq] for seq in before)
    # What was given is what to_dict() says, and to_dict() itself shares nothing.
    expected = memory.to_dict() | {"revision": 2, "storage_key": "k"}
    assert json.loads(json.dumps(second)) == expected
    assert all(t is not after[t["seq"]] for t in memory.to_dict()["turns"])
    # A loaded state's turns are new entries: nothing of the old state is given again.
    memory.from_dict(json.loads(store.records["k"]))
    await memory.persist(store, "k")
    assert not any(t is before.get(t["seq"]) for t in store.given[-1]["turns"])
    assert json.loads(json.dumps(store.given[-1])) == memory.to_dict() | {"storage_key": "k"}
    await memory.aclose()


@pytest.mark.anyio
async def test_changes_counts_every_change_of_the_state_and_nothing_else() -> None:
    config = config_for(
        budget={"overflow_policy": "error", "total_max_tokens": 400, "summary_max_tokens": 100}
    )
    summarizer = Switchable(blocked_summarizer)
    memory = DefaultShortTermMemory(config=config, summarizer=summarizer, key=KEY_A)
    seen = [memory.changes]

    def moved() -> bool:
        seen.append(memory.changes)
        return seen[-1] != seen[-2]

    await memory.add_turn(make_turn(0))
    assert moved()
    await memory.get_llm_context()
    memory.estimate_tokens()
    await memory.persist(RecordingStore(), "k")
    assert not moved()
    with pytest.raises(MemoryBudgetExceeded):
        await memory.add_turn(ConversationTurn(user_message="x" * 2000, assistant_response=""))
    assert not moved()  # refused: the state did not change
    summarizer.target = joining
    for index in range(2, 6):
        count = memory.changes
        await memory.add_turn(make_turn(index))
        assert memory.changes > count  # each turn moves it forward, never back
    await memory.flush()
    assert moved()  # turns added and summaries installed
    state = memory.to_dict()
    before = memory.changes
    memory.from_dict(state)
    assert memory.changes > before
    await memory.aclose()


#: One turn as ``to_dict`` writes it.
_RECORD = {
    "seq": 1,
    "user_message": "u1",
    "assistant_response": "a1",
    "trajectory_digest": None,
    "artifacts_shown": {},
    "artifacts_hidden_refs": [],
    "ts": 0.0,
}


@pytest.mark.requirement("SER-003")
@pytest.mark.parametrize("strategy", ["none", "truncation"])
@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"health": "degraded"}, "health 'degraded'"),
        ({"health": "retry", "failures": 1}, "health 'retry', failed calls (1)"),
        ({"failures": 2}, "failed calls (2)"),
        ({"summary": "é"}, "a summary"),
        ({"pending": "TURN"}, "pending turns"),
        ({"backlog": "TURN"}, "backlog turns"),
    ],
    ids=["degraded", "retry", "failures", "summary", "pending", "backlog"],
)
def test_a_memory_without_a_summarizer_refuses_what_it_never_holds(
    strategy: str, change: dict[str, Any], named: str
) -> None:
    memory = DefaultShortTermMemory(config=ShortTermMemoryConfig(strategy=strategy))  # type: ignore[arg-type]
    before = memory.to_dict()
    record = _RECORD
    state = {**before, "next_seq": 2}
    state.update({k: [record] if v == "TURN" else v for k, v in change.items()})
    with pytest.raises(ValueError, match=f"a '{strategy}' memory never holds {re.escape(named)}$"):
        memory.from_dict(state)
    assert memory.to_dict() == before
    # The same state, as the memory writes it, loads.
    memory.from_dict({**before, "next_seq": 2})


@pytest.mark.requirement("SER-003")
def test_a_none_memory_refuses_turns_and_truncation_keeps_them() -> None:
    record = _RECORD
    for strategy in ("none", "truncation"):
        memory = DefaultShortTermMemory(config=ShortTermMemoryConfig(strategy=strategy))  # type: ignore[arg-type]
        state = {**memory.to_dict(), "next_seq": 2, "turns": [record]}
        if strategy == "none":
            with pytest.raises(ValueError, match=r"a 'none' memory never holds turns$"):
                memory.from_dict(state)
        else:
            memory.from_dict(state)
            assert [t["seq"] for t in memory.to_dict()["turns"]] == [1]
