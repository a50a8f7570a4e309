"""The session layer in one process: keys, isolation, turn lifecycle, serialisation."""

from __future__ import annotations

import asyncio
import json
import logging
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from stm_stores import InMemoryStateStore

from reference_impl import (
    ConversationTurn,
    MemoryBudget,
    MemoryBudgetExceeded,
    MemoryIsolation,
    MemoryKey,
    ShortTermMemoryConfig,
    TrajectoryDigest,
)
from reference_impl.session import (
    DEFAULT_MAX_OBSERVATION_CHARS,
    MemoryRouter,
    build_trajectory_digest,
)
from reference_impl.summarizers import RuleBasedSummarizer

pytestmark = pytest.mark.anyio


def _config(
    strategy: str = "rolling_summary", *, require_explicit_key: bool = True, window: int = 2
) -> ShortTermMemoryConfig:
    return ShortTermMemoryConfig(
        strategy=strategy,  # type: ignore[arg-type]
        budget=MemoryBudget(full_zone_turns=window),
        isolation=MemoryIsolation(require_explicit_key=require_explicit_key),
    )


def _router(store: InMemoryStateStore | None = None, **kwargs: Any) -> MemoryRouter:
    config = kwargs.pop("config", None) or _config()
    return MemoryRouter(config, store=store, summarizer=RuleBasedSummarizer(), **kwargs)


def _ctx(tenant: str, user: str = "u-1", session: str = "s-1") -> dict[str, str]:
    return {"tenant_id": tenant, "user_id": user, "session_id": session}


async def _say(router: MemoryRouter, message: str, **turn_args: Any) -> dict[str, Any]:
    """Run one finished turn; return the ``conversation_memory`` it was given."""
    async with router.turn(**turn_args) as turn:
        memory = dict(turn.llm_context.get("conversation_memory", {}))
        await turn.finish(message, f"answer to {message}")
    return memory


# -- KEY: isolation through the whole path -------------------------------------------------


async def test_tenants_sharing_user_and_session_ids_never_see_each_other() -> None:
    store = InMemoryStateStore()
    router = _router(store)
    seen: dict[str, str] = {"alpha": "", "beta": ""}
    markers = {"alpha": "ALPHA-SECRET-7f3a", "beta": "BETA-SECRET-91c2"}
    for index in range(6):  # enough for evictions, summaries and pending turns
        for tenant in ("alpha", "beta"):
            memory = await _say(router, f"{markers[tenant]} #{index}", tool_context=_ctx(tenant))
            seen[tenant] += json.dumps(memory)
    await router.flush()
    # A second router hydrating from the shared store sees the same separation.
    await router.aclose()
    fresh = _router(store)
    for tenant in ("alpha", "beta"):
        async with fresh.turn(tool_context=_ctx(tenant)) as turn:
            seen[tenant] += json.dumps(turn.llm_context["conversation_memory"])
            turn.pause()
    await fresh.aclose()

    assert markers["alpha"] in seen["alpha"] and markers["beta"] in seen["beta"]
    assert markers["beta"] not in seen["alpha"] and "BETA" not in seen["alpha"]
    assert markers["alpha"] not in seen["beta"] and "ALPHA" not in seen["beta"]
    assert sorted(await store.keys()) == ["alpha:u-1:s-1", "beta:u-1:s-1"]
    for key in await store.keys():
        other = "BETA" if key.startswith("alpha") else "ALPHA"
        assert other not in json.dumps(await store.load_memory_state(key))


async def test_explicit_key_wins_over_tool_context() -> None:
    router = _router()
    explicit = MemoryKey("t-explicit", "u", "s")
    async with router.turn(tool_context=_ctx("t-ctx"), memory_key=explicit) as turn:
        assert turn.key == explicit
        turn.pause()
    await router.aclose()


async def test_dotted_paths_follow_nested_mappings_and_attributes() -> None:
    isolation = MemoryIsolation(
        tenant_key="auth.tenant", user_key="auth.user.id", session_key="request.session"
    )
    config = ShortTermMemoryConfig(strategy="truncation", isolation=isolation)
    router = MemoryRouter(config)
    tool_context = {
        "auth": SimpleNamespace(tenant="acme", user=SimpleNamespace(id="u-7")),
        "request": {"session": "s-9"},
    }
    async with router.turn(tool_context=tool_context) as turn:
        assert turn.key == MemoryKey("acme", "u-7", "s-9")
        turn.pause()
    await router.aclose()


async def test_llm_context_is_never_read_for_keys() -> None:
    store = InMemoryStateStore()
    router = _router(store)
    caller = {"tenant_id": "t", "user_id": "u", "session_id": "s"}
    async with router.turn(llm_context=caller) as turn:
        assert turn.key is None
        await turn.finish("hello", "hi")
    await router.aclose()
    assert await store.keys() == []


# -- KEY-006: fail closed --------------------------------------------------------------


@pytest.mark.parametrize("tool_context", [None, {}, {"session_id": "  "}, {"session_id": {}}])
async def test_no_key_means_context_unchanged_and_nothing_stored(tool_context: Any) -> None:
    store = InMemoryStateStore()
    router = _router(store)
    caller = {"system": "be brief", "nested": {"a": [1, 2]}}
    snapshot = json.dumps(caller, sort_keys=True)
    async with router.turn(llm_context=caller, tool_context=tool_context) as turn:
        assert turn.key is None
        assert turn.llm_context is caller
        assert not turn.memory_injected
        assert await turn.finish("hello", "hi") is None
    await router.aclose()
    assert json.dumps(caller, sort_keys=True) == snapshot
    assert await store.keys() == []
    assert len(router) == 0
    assert router.stats.disabled_turns == 1 and router.stats.turns_recorded == 0


async def test_strategy_none_disables_memory() -> None:
    store = InMemoryStateStore()
    router = MemoryRouter(ShortTermMemoryConfig(strategy="none"), store=store)
    async with router.turn(tool_context=_ctx("t")) as turn:
        assert turn.key is None
        await turn.finish("hello", "hi")
    await router.aclose()
    assert await store.keys() == []


# -- ephemeral keys ----------------------------------------------------------------------


async def test_anonymous_calls_get_distinct_ephemeral_keys() -> None:
    store = InMemoryStateStore()
    router = _router(store, config=_config(require_explicit_key=False))
    keys = []
    for marker in ("ANON-ONE-5d1e", "ANON-TWO-c7b0"):
        async with router.turn(llm_context={}) as turn:
            assert turn.key is not None
            keys.append(turn.key)
            # Nothing of the other anonymous caller is visible.
            assert "ANON" not in json.dumps(turn.llm_context)
            await turn.finish(marker, "ok")
    assert keys[0] != keys[1]
    for key in keys:
        assert (key.tenant_id, key.user_id) == ("default", "anonymous")
        assert key.session_id.startswith("ephemeral-")
    assert router.stats.ephemeral_keys == 2
    # The minted key is the handle to continue that conversation.
    memory = await _say(router, "again", memory_key=keys[0])
    assert "ANON-ONE-5d1e" in json.dumps(memory) and "ANON-TWO" not in json.dumps(memory)
    await router.aclose()
    assert sorted(await store.keys()) == sorted(k.composite() for k in keys)


async def test_resolvable_context_still_wins_without_explicit_requirement() -> None:
    router = _router(config=_config(require_explicit_key=False))
    async with router.turn(tool_context=_ctx("t")) as turn:
        assert turn.key == MemoryKey("t", "u-1", "s-1")
        turn.pause()
    await router.aclose()
    assert router.stats.ephemeral_keys == 0


# -- only on finish ----------------------------------------------------------------------


async def test_pause_records_and_persists_nothing() -> None:
    store = InMemoryStateStore()
    router = _router(store)
    async with router.turn(tool_context=_ctx("t")) as turn:
        turn.pause()
        assert turn.status == "paused"
        with pytest.raises(RuntimeError):
            await turn.finish("late", "late")
    await router.aclose()
    assert await store.keys() == []
    assert router.stats.turns_recorded == 0


async def test_exception_records_and_persists_nothing() -> None:
    store = InMemoryStateStore()
    router = _router(store)
    with pytest.raises(ZeroDivisionError):
        async with router.turn(tool_context=_ctx("t")) as turn:
            _ = 1 / 0
    assert turn.status == "failed"
    await router.aclose()
    assert await store.keys() == []


async def test_no_call_records_nothing_and_keeps_earlier_turns() -> None:
    store = InMemoryStateStore()
    router = _router(store)
    await _say(router, "first", tool_context=_ctx("t"))
    saved = await store.load_memory_state("t:u-1:s-1")
    async with router.turn(tool_context=_ctx("t")) as turn:
        pass  # neither finish nor pause
    assert turn.status == "closed"
    async with router.turn(tool_context=_ctx("t")) as turn:
        turn.pause()
    memory = await _say(router, "second", tool_context=_ctx("t"))
    assert [t["user"] for t in memory["recent_turns"]] == ["first"]
    await router.aclose()
    assert saved is not None and saved["revision"] == 1
    stored = await store.load_memory_state("t:u-1:s-1")
    assert stored is not None
    assert [t["user_message"] for t in stored["turns"]] == ["first", "second"]


async def test_finish_twice_or_outside_the_block_fails() -> None:
    router = _router()
    async with router.turn(tool_context=_ctx("t")) as turn:
        await turn.finish("q", "a")
        with pytest.raises(RuntimeError):
            await turn.finish("q", "a")
    with pytest.raises(RuntimeError):
        turn.pause()
    await router.aclose()


async def test_a_finish_add_turn_would_refuse_leaves_the_turn_open() -> None:
    """Refused text records nothing and does not spend the turn: a corrected ``finish``
    records it."""
    router = _router()
    async with router.turn(tool_context=_ctx("t")) as turn:
        with pytest.raises(TypeError, match="surrogate"):
            await turn.finish("bad \ud800 text", "a")
        assert turn.status == "open"
        await turn.finish("fixed text", "a")
    assert router.stats.turns_recorded == 1
    with pytest.raises(TypeError, match="MemoryKey"):
        await router.flush("t:u-1:s-1")  # type: ignore[arg-type]
    await router.aclose()


async def test_a_finish_the_budget_refuses_leaves_the_turn_open() -> None:
    """Under ``overflow_policy="error"`` a turn that does not fit is refused whole
    (BUD-006): nothing is recorded or saved, and a corrected ``finish`` records it."""
    store = InMemoryStateStore()
    config = ShortTermMemoryConfig(
        strategy="truncation",
        budget=MemoryBudget(
            full_zone_turns=5, summary_max_tokens=10, total_max_tokens=60, overflow_policy="error"
        ),
    )
    router = _router(store, config=config)
    async with router.turn(tool_context=_ctx("t")) as turn:
        with pytest.raises(MemoryBudgetExceeded):
            await turn.finish("question", "x" * 1000)
        assert turn.status == "open"
        assert router.stats.turns_recorded == 0
        assert await store.load_memory_state("t:u-1:s-1") is None
        await turn.finish("question", "a short answer")
        assert turn.status == "finished"
    stored = await store.load_memory_state("t:u-1:s-1")
    assert stored is not None
    assert [t["assistant_response"] for t in stored["turns"]] == ["a short answer"]
    await router.aclose()


# -- llm_context merge -------------------------------------------------------------------


async def test_memory_is_merged_into_a_copy_of_the_callers_context() -> None:
    router = _router()
    await _say(router, "remember me", tool_context=_ctx("t"))
    caller = {"system": "hi", "conversation_memory": "caller's own"}
    async with router.turn(llm_context=caller, tool_context=_ctx("t")) as turn:
        assert turn.memory_injected
        assert turn.llm_context is not caller
        assert turn.llm_context["system"] == "hi"
        recent = turn.llm_context["conversation_memory"]["recent_turns"]
        assert recent[0]["user"] == "remember me"
        turn.pause()
    assert caller == {"system": "hi", "conversation_memory": "caller's own"}
    await router.aclose()


async def test_non_serialisable_context_skips_memory_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemoryStateStore()
    router = _router(store)
    await _say(router, "earlier", tool_context=_ctx("t"))
    caller = {"handle": object()}
    with caplog.at_level(logging.WARNING, logger="reference_impl.session"):
        async with router.turn(llm_context=caller, tool_context=_ctx("t")) as turn:
            assert turn.llm_context is caller
            assert not turn.memory_injected
            await turn.finish("still recorded", "ok")
    assert any("not JSON-serialisable" in r.getMessage() for r in caplog.records)
    assert list(caller) == ["handle"]
    memory = await _say(router, "next", tool_context=_ctx("t"))
    assert [t["user"] for t in memory["recent_turns"]] == ["earlier", "still recorded"]
    await router.aclose()


# -- trajectory digest -------------------------------------------------------------------


def test_build_trajectory_digest_truncates_each_observation() -> None:
    long = "x" * 1000
    digest = build_trajectory_digest(["search", "fetch"], [long, {"ok": True}], reasoning="because")
    assert digest is not None
    assert digest.tools_invoked == ["search", "fetch"]
    first, second = digest.observations_summary.split("\n")
    assert first == "- search: " + "x" * DEFAULT_MAX_OBSERVATION_CHARS + "…"
    assert second == '- fetch: {"ok": true}'
    assert digest.reasoning_summary == "because"
    short = build_trajectory_digest(["a"], ["abcdef"], max_observation_chars=3)
    assert short is not None and short.observations_summary == "- a: abc…"
    assert build_trajectory_digest([], []) is None
    with pytest.raises(ValueError):
        build_trajectory_digest(["a"], [1, 2])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"observations": "one observation"},  # would be one per character
        {"max_observation_chars": float("nan")},  # would never cut
        {"max_observation_chars": True},  # would cut to one character
        {"max_observation_chars": 2.5},
    ],
    ids=["observations-str", "max-nan", "max-bool", "max-float"],
)
def test_build_trajectory_digest_refuses_arguments_of_another_kind(kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        build_trajectory_digest(["search"], **kwargs)


async def test_finish_stores_the_digest_in_the_turn() -> None:
    router = _router()
    async with router.turn(tool_context=_ctx("t")) as turn:
        recorded = await turn.finish("q", "a", tools=["search"], observations=["found it"])
    assert isinstance(recorded, ConversationTurn)
    assert recorded.trajectory_digest == TrajectoryDigest(["search"], "- search: found it")
    memory = await _say(router, "next", tool_context=_ctx("t"))
    digest = memory["recent_turns"][0]["trajectory_digest"]
    assert digest["tools_invoked"] == ["search"]
    ready = TrajectoryDigest(["calc"], "- calc: 4")
    async with router.turn(tool_context=_ctx("t")) as turn:
        with pytest.raises(ValueError):
            await turn.finish("q", "a", trajectory=ready, tools=["x"])
        assert (await turn.finish("q", "a", trajectory=ready)) is not None
    await router.aclose()


# -- serialisation of turns per key ------------------------------------------------------


async def test_turns_on_one_key_are_serialised() -> None:
    router = _router()
    events: list[str] = []
    first_inside = anyio.Event()

    async def run(name: str, hold: float) -> None:
        async with router.turn(tool_context=_ctx("t")) as turn:
            events.append(f"{name} enter")
            first_inside.set()
            await anyio.sleep(hold)
            events.append(f"{name} exit")
            await turn.finish(name, "ok")

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "first", 0.05)
        await first_inside.wait()
        tg.start_soon(run, "second", 0)
    assert events == ["first enter", "first exit", "second enter", "second exit"]
    memory = await _say(router, "third", tool_context=_ctx("t"))
    assert [t["user"] for t in memory["recent_turns"]] == ["first", "second"]
    await router.aclose()


async def test_turns_on_different_keys_do_not_block_each_other() -> None:
    router = _router()
    release = anyio.Event()

    async def hold_a() -> None:
        async with router.turn(tool_context=_ctx("a")) as turn:
            await release.wait()
            await turn.finish("a", "ok")

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold_a)
        await anyio.sleep(0.01)
        with anyio.fail_after(1):  # would time out if key "b" waited for key "a"
            await _say(router, "b", tool_context=_ctx("b"))
        release.set()
    await router.aclose()


async def test_aclose_leaves_no_task_behind() -> None:
    store = InMemoryStateStore()

    async def slow(payload: Any) -> dict[str, str]:
        await asyncio.sleep(0.05)
        return await RuleBasedSummarizer()(payload)

    router = MemoryRouter(_config(window=1), store=store, summarizer=slow)
    for index in range(4):
        await _say(router, f"turn {index}", tool_context=_ctx("t"))
    await router.aclose()
    # Memory workers are "stm-summarizer", router flushers "stm-flush:<key>".
    assert [t for t in asyncio.all_tasks() if t.get_name().startswith("stm-")] == []
    stored = await store.load_memory_state("t:u-1:s-1")
    assert stored is not None
    # aclose flushed: every evicted turn is covered by the saved summary.
    assert stored["pending"] == [] and "turn 2" in stored["summary"]
    with pytest.raises(RuntimeError):
        router.turn(tool_context=_ctx("t"))


async def test_reentering_the_same_key_from_inside_a_turn_fails_fast() -> None:
    router = _router()
    async with router.turn(tool_context=_ctx("t")) as turn:
        with pytest.raises(RuntimeError, match="deadlock"):
            async with router.turn(tool_context=_ctx("t")):
                pass
        with pytest.raises(RuntimeError, match="deadlock"):
            await router.flush()
        with anyio.fail_after(1):  # another key is fine
            await _say(router, "other", tool_context=_ctx("other"))
        await turn.finish("q", "a")
    await router.aclose()


async def test_reentering_a_key_another_aclose_is_retiring_fails_fast() -> None:
    """Another task's ``aclose()`` takes the key off the router's list and waits for the
    turn in progress to end: from inside that turn, an ``aclose()``, a ``flush()`` or a
    nested turn on the key must fail fast too, not wait for the turn it is part of."""
    router = _router()
    inside = asyncio.Event()
    outcomes: list[str] = []

    async def run() -> None:
        async with router.turn(tool_context=_ctx("t")) as turn:
            await turn.finish("q", "a")
            inside.set()
            await asyncio.sleep(0.01)
            assert router._evicting, "the other aclose has the key off the list by now"
            attempts = (
                router.aclose,
                router.flush,  # waits for retirements: this one waits for this turn
                lambda: _say(router, "x", tool_context=_ctx("t")),
            )
            for attempt in attempts:
                try:
                    await attempt()
                except RuntimeError as exc:
                    outcomes.append(str(exc))

    running = asyncio.create_task(run())
    await inside.wait()
    with anyio.fail_after(5):
        await asyncio.gather(running, router.aclose())
    # The nested turn meets a closed router first; either way, nothing waits on itself.
    assert outcomes == [
        "aclose inside a turn on the same key would deadlock",
        "flush inside a turn on the same key would deadlock",
        "router is closed",
    ]


async def test_flush_saves_the_newest_summary_at_once() -> None:
    store = InMemoryStateStore()

    async def slow(payload: Any) -> dict[str, str]:
        await asyncio.sleep(0.05)
        return await RuleBasedSummarizer()(payload)

    router = MemoryRouter(_config(window=1), store=store, summarizer=slow)
    key = MemoryKey("t", "u-1", "s-1")
    for index in range(3):
        await _say(router, f"FLUSH-{index}", memory_key=key)
    await router.flush(key)
    stored = await store.load_memory_state(key.composite())
    assert stored is not None and stored["pending"] == []
    assert "FLUSH-0" in stored["summary"] and "FLUSH-1" in stored["summary"]
    await router.flush(MemoryKey("t", "u-1", "not loaded"))  # a no-op
    await router.aclose()
