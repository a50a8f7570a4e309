"""KEY — isolation between memory keys."""

from __future__ import annotations

import json
import uuid
from collections import ChainMap
from types import MappingProxyType, SimpleNamespace
from typing import Any

import pytest

from stm_conformance import ScriptedSummarizer
from stm_conformance.checks import (
    EITHER_STRATEGY,
    config,
    eventually,
    json_state,
    memory_view,
    turn,
)
from stm_conformance.contract import MemoryIsolation, MemoryKey

req = pytest.mark.stm_requirement
cap = pytest.mark.stm_capability
scenario = pytest.mark.stm_scenario

#: Pairs of distinct keys that a careless storage-key encoding merges: separators inside
#: parts, escape-sequence twins, case and Unicode-normalisation twins, empty and very long
#: parts. Named so that a failing node ID can be pasted back to rerun it.
ADVERSARIAL_KEYS = {
    "separator-moves": (("a:b", "c", "d"), ("a", "b:c", "d")),
    "escape-twin": (("t", "u", "s%3A"), ("t", "u", "s:")),
    "slash-and-pipe": (("t/u", "v", "s"), ("t", "u|v", "s")),
    "nul-separator": (("t\x00u", "v", "s"), ("t", "u\x00v", "s")),
    "astral-unicode": (("tenant", "user", "séssion-🦜"), ("tenant", "user", "séssion-🐧")),
    "nfc-nfd-twins": (("t", "u", "caf\u00e9"), ("t", "u", "cafe\u0301")),
    "case-twins": (("Tenant", "u", "s"), ("tenant", "u", "s")),
    "user-case-twins": (("t", "Ann", "s"), ("t", "ann", "s")),
    "session-case-twins": (("t", "u", "S"), ("t", "u", "s")),
    "user-nfc-nfd-twins": (("t", "Zo\u00eb", "s"), ("t", "Zoe\u0308", "s")),
    "long-parts": (("t", "u", "x" * 1000), ("t", "u", "x" * 999)),
    "empty-vs-defaults": (("", "", "s"), ("default", "anonymous", "s")),
    "empty-parts-shift": (("", "ab", "s"), ("a", "b", "s")),
    "prefix-lookalike": (("kv:v1:t", "u", "s"), ("t", "u", "s")),
    # Whitespace twins: trailing whitespace goes in tenant or user, since _pair appends to
    # the session part.
    "trailing-space": (("t ", "u", "s"), ("t", "u", "s")),
    "leading-space": (("t", " u", "s"), ("t", "u", "s")),
    "tab-twins": (("t", "u\t", "\ts"), ("t", "u", "s")),
    "blank-vs-empty": (("t", " ", "s"), ("t", "", "s")),
    # A placeholder written for an empty part (some stores refuse empty path segments),
    # not escaped where it is a part of its own.
    "empty-placeholder-twins": (("t", "", "s"), ("t", "_", "s")),
    "empty-tenant-placeholder-twins": (("", "u", "s"), ("-", "u", "s")),
    # A backslash escape that does not escape itself: "u\\" + ":" + "x:s" reads as
    # "u:x\\" + ":" + "s" once both separators are escaped.
    "backslash-escape-twin": (("t", "u\\", "x:s"), ("t", "u:x\\", "s")),
    "trailing-backslash": (("t\\", "u", "s"), ("t", "\\u", "s")),
    # Control characters taken for "never in an id" and used as separators, unescaped.
    "unit-separator": (("t\x1fu", "v", "s"), ("t", "u\x1fv", "s")),
    "record-separator": (("t", "u\x1ev", "s"), ("t", "u", "v\x1es")),
}


def _pair(name: str) -> tuple[MemoryKey, MemoryKey]:
    """The named pair, each made unique to this run so shared storage never sees a rerun."""
    run = uuid.uuid4().hex[:12]
    first, second = ADVERSARIAL_KEYS[name]
    return MemoryKey(*first[:2], first[2] + run), MemoryKey(*second[:2], second[2] + run)


def _marker_free(view: Any, marker: str) -> bool:
    return marker not in json.dumps(view, ensure_ascii=False)


def _sees(view: Any, marker: str) -> bool:
    return not _marker_free(view, marker)


def _assert_shows_nothing(view: Any, strategy: str, what: str) -> None:
    """``view`` (of a memory that holds nothing of its own) is the spec's empty view. One
    that shows no turn and no summary but is shaped otherwise breaks the view's shape
    (STR-002, STR-003), not isolation: only what it shows is KEY-001's."""
    if view == {"recent_turns": []}:
        return
    shows = view.get("recent_turns") or view.get("pending_turns") or view.get("summary")
    rule = "KEY-001" if shows else "STR-003" if strategy == "rolling_summary" else "STR-002"
    raise AssertionError(f"{rule}: {what} shows {view}, not the empty view {{'recent_turns': []}}")


@req("KEY-001")
@pytest.mark.parametrize("strategy", EITHER_STRATEGY)
async def test_state_of_one_key_is_invisible_through_another(make_memory, strategy):
    cfg = config(strategy, full_zone_turns=1)
    a = await make_memory(cfg, key=MemoryKey("tenant-a", "user", "session"))
    b = await make_memory(cfg, key=MemoryKey("tenant-b", "user", "session"))
    empty_tokens = b.estimate_tokens()
    assert b.health.value == "healthy", (
        f"HLT-001: a new {strategy} memory is {b.health.value!r} (precondition)"
    )
    for i in range(4):
        await a.add_turn(turn(i, pad=5))
    if strategy == "rolling_summary":
        await a.flush()
    _assert_shows_nothing(await memory_view(b), strategy, "key B, with turns only in key A,")
    assert b.estimate_tokens() == empty_tokens, "key B's token count moved with key A's turns"
    assert b.health.value == "healthy", f"key B's health moved with key A's: {b.health.value!r}"


@req("KEY-002")
@cap("truncation")
@pytest.mark.parametrize("name", list(ADVERSARIAL_KEYS))
async def test_adversarial_keys_stay_apart(make_memory, name):
    first, second = _pair(name)
    cfg = config("truncation", full_zone_turns=3)
    a = await make_memory(cfg, key=first)
    b = await make_memory(cfg, key=second)
    await a.add_turn(turn(1, pad=3))  # marker u1xxx
    await b.add_turn(turn(2, pad=4))  # marker u2xxxx
    view_a, view_b = await memory_view(a), await memory_view(b)
    assert _marker_free(view_b, "u1xxx"), f"KEY-002: {second!r} sees the turns of {first!r}"
    assert _marker_free(view_a, "u2xxxx"), f"KEY-002: {first!r} sees the turns of {second!r}"
    assert _sees(view_a, "u1xxx") and _sees(view_b, "u2xxxx"), (
        f"KEY-002: a memory lost its own turn next to its twin key: {view_a} / {view_b}"
    )


@req("KEY-002")
@cap("persistence")
@cap("truncation")
@pytest.mark.parametrize("name", list(ADVERSARIAL_KEYS))
async def test_storage_keys_are_injective_through_one_store(
    make_memory, stm_provider, stm_store, name
):
    first, second = _pair(name)
    storage = [stm_provider.key_for_storage(k) for k in (first, second)]
    assert all(isinstance(k, str) for k in storage), f"KEY-002: storage keys {storage!r}"
    assert storage[0] != storage[1], (
        f"KEY-002: {first!r} and {second!r} share the storage key {storage[0]!r}"
    )
    cfg = config("truncation", full_zone_turns=3)
    for i, (key, where) in enumerate(zip((first, second), storage, strict=True)):
        memory = await make_memory(cfg, key=key)
        await memory.add_turn(turn(i, pad=5 + i))
        await memory.persist(stm_store, where)
    for i, (key, where) in enumerate(zip((first, second), storage, strict=True)):
        fresh = await make_memory(cfg, key=key)
        await fresh.hydrate(stm_store, where)
        view = await memory_view(fresh)
        own, other = f"u{i}" + "x" * (5 + i), f"u{1 - i}" + "x" * (6 - i)
        assert _marker_free(view, other), f"KEY-002: {key!r} hydrated its twin's turns: {view}"
        assert _sees(view, own), f"KEY-002: {key!r} did not get its own state back: {view}"


@req("KEY-001")
@cap("rolling_summary")
async def test_a_memory_made_after_another_tenant_summarized_starts_empty(make_memory):
    """Tenant B's memory is made only once tenant A's has a summary (same user and session
    ids): state a backend keeps outside the memory object, such as a cache of summaries to
    resume from, must be scoped by the whole key. Ids unique to this run keep other checks'
    memories out of it."""
    run = uuid.uuid4().hex[:12]
    cfg = config(full_zone_turns=1)
    a = await make_memory(cfg, key=MemoryKey("tenant-a", f"u-{run}", f"s-{run}"))
    for i in range(4):
        await a.add_turn(turn(i, pad=5))
    await a.flush()
    assert (await memory_view(a)).get("summary"), "check setup: key A installed no summary"
    summarizer = ScriptedSummarizer()
    b = await make_memory(
        cfg, key=MemoryKey("tenant-b", f"u-{run}", f"s-{run}"), summarizer=summarizer
    )
    _assert_shows_nothing(
        await memory_view(b), "rolling_summary", "a new memory of key B, after key A's summary,"
    )
    await b.add_turn(turn(100))
    await b.add_turn(turn(101))  # u100 is evicted: B's first call
    await summarizer.wait_for_calls(1)
    previous = summarizer.calls[0].get("previous_summary")
    assert not previous, (
        f"KEY-001: key B's first summarizer call got key A's summary as previous_summary: "
        f"{previous!r:.120}"
    )


@req("KEY-001")
@cap("persistence")
@pytest.mark.stm_capability("truncation")
async def test_shared_store_keeps_keys_apart(make_memory, stm_provider, stm_store):
    cfg = config("truncation", full_zone_turns=3)
    key_a, key_b = MemoryKey("tenant-a", "u", "s"), MemoryKey("tenant-b", "u", "s")
    a = await make_memory(cfg, key=key_a)
    await a.add_turn(turn(7, pad=4))
    await a.persist(stm_store, stm_provider.key_for_storage(key_a))
    b = await make_memory(cfg, key=key_b)
    await b.hydrate(stm_store, stm_provider.key_for_storage(key_b))
    assert _marker_free(await memory_view(b), "u7xxxx"), "hydrate loaded another key's state"


@scenario("direction:accept", "direction:reject")
@req("KEY-007")
@cap("serialization")
@pytest.mark.stm_capability("truncation")
@pytest.mark.parametrize(
    "other",
    [
        ("t", "u", "b"),
        ("t2", "u", "a"),
        ("t", "u2", "a"),
        ("T", "u", "a"),
        ("t", "U", "a"),
        ("t", "u", "A"),
        ("t ", "u", "a"),
        ("t", "\u00a0u", "a"),
        ("t", "u", " a"),
    ],
    ids=[
        "session",
        "tenant",
        "user",
        "tenant-case",
        "user-case",
        "session-case",
        "tenant-space",
        "user-nbsp",
        "session-space",
    ],
)
async def test_from_dict_refuses_another_keys_state(make_memory, other):
    """Keys that differ in any one part, case and surrounding whitespace included, are
    other keys (KEY-002 keeps them apart in storage)."""
    cfg = config("truncation", full_zone_turns=3)
    a = await make_memory(cfg, key=MemoryKey("t", "u", "a"))
    await a.add_turn(turn(1))
    b = await make_memory(cfg, key=MemoryKey(*other))
    before = await memory_view(b)
    with pytest.raises(ValueError):
        b.from_dict(a.to_dict())
    assert await memory_view(b) == before, "a refused load changed the memory"
    # ... and goes on from its own state: a later turn lands as in a memory never offered
    # the foreign state.
    await b.add_turn(turn(2))
    fresh = await make_memory(cfg, key=MemoryKey("t", "u", "b2"))
    await fresh.add_turn(turn(2))
    assert await memory_view(b) == await memory_view(fresh), (
        "KEY-007: after a refused load the memory did not go on from its own state"
    )
    # The other side: a state loads into a memory of its own key (same parts, new object).
    twin = await make_memory(cfg, key=MemoryKey("t", "u", "a"))
    twin.from_dict(a.to_dict())
    assert await memory_view(twin) == await memory_view(a), (
        "KEY-007: a state was not loaded into a memory of the key it records"
    )


@scenario("direction:accept", "direction:reject")
@req("KEY-007")
@cap("serialization")
@pytest.mark.stm_capability("truncation")
@pytest.mark.parametrize(
    "name", ["separator-moves", "escape-twin", "empty-parts-shift", "backslash-escape-twin"]
)
async def test_from_dict_refuses_the_state_of_a_key_that_spells_alike(make_memory, name):
    """Keys whose parts, joined or escaped carelessly, spell the same text (KEY-002's
    twins) are other keys: each refuses the other's state, and takes its own."""
    cfg = config("truncation", full_zone_turns=3)
    keys = _pair(name)
    memories = [await make_memory(cfg, key=key) for key in keys]
    for i, memory in enumerate(memories):
        await memory.add_turn(turn(i, pad=5))
    for here, there in ((0, 1), (1, 0)):
        own, other, memory = keys[here], keys[there], memories[here]
        before = await memory_view(memory)
        try:
            memory.from_dict(memories[there].to_dict())
        except ValueError:
            pass
        else:
            raise AssertionError(
                f"KEY-007: from_dict loaded the state of {other!r} into the memory of {own!r}"
            )
        assert await memory_view(memory) == before, (
            "SER-003: a refused load changed the memory (it must leave it untouched)"
        )
        twin = await make_memory(cfg, key=MemoryKey(**own.as_dict()))
        twin.from_dict(memory.to_dict())
        assert await memory_view(twin) == before, (
            f"KEY-007: the state of {own!r} was not loaded into a memory of that key"
        )


@req("KEY-007")
@cap("persistence")
@pytest.mark.stm_capability("truncation")
async def test_hydrate_refuses_state_saved_under_another_key(make_memory, stm_provider, stm_store):
    cfg = config("truncation", full_zone_turns=3)
    key_a, key_b = MemoryKey("t", "u", "a"), MemoryKey("t", "u", "b")
    where_a, where_b = stm_provider.key_for_storage(key_a), stm_provider.key_for_storage(key_b)
    a = await make_memory(cfg, key=key_a)
    await a.add_turn(turn(3, pad=6))
    await a.persist(stm_store, where_a)
    # A mis-routed record: A's state stored under B's storage key.
    stolen = await stm_store.load_memory_state(where_a)
    await stm_store.save_memory_state(where_b, stolen)
    b = await make_memory(cfg, key=key_b)
    await b.hydrate(stm_store, where_b)
    assert _marker_free(await memory_view(b), "u3xxxxxx"), "hydrate grafted another key's state"


@req("KEY-007")
@cap("persistence")
@pytest.mark.stm_capability("truncation")
@pytest.mark.parametrize("writer", ["persist", "another_writer"])
async def test_hydrate_refuses_another_keys_state_under_its_storage_key(
    make_memory, stm_provider, stm_store, writer
):
    """A's state where B looks: saved there by a mis-routed ``persist`` (so the record names
    B's storage key), or put there by another writer, a migration or a copy of A's
    ``to_dict()`` (so it names none, as PenguiFlow's version 1 records do not). Only the
    key the state records tells that it is A's."""
    cfg = config("truncation", full_zone_turns=3)
    key_a, key_b = MemoryKey("t", "u", "a"), MemoryKey("t", "u", "b")
    a = await make_memory(cfg, key=key_a)
    await a.add_turn(turn(4, pad=6))
    where_b = stm_provider.key_for_storage(key_b)
    if writer == "persist":
        await a.persist(stm_store, where_b)
    else:
        await stm_store.save_memory_state(where_b, json_state(a))
    b = await make_memory(cfg, key=key_b)
    before = await memory_view(b)
    await b.hydrate(stm_store, where_b)
    after = await memory_view(b)
    assert _marker_free(after, "u4xxxxxx") and after == before, (
        f"KEY-007: hydrate loaded another key's state put under this memory's storage key "
        f"by {'a persist' if writer == 'persist' else 'another writer, naming no storage key'}"
    )


@req("KEY-007")
@cap("persistence")
@pytest.mark.stm_capability("truncation")
async def test_hydrate_refuses_a_state_under_a_storage_key_it_was_not_saved_under(
    make_memory, stm_provider, stm_store
):
    """The same memory's own state, copied to a storage key no memory derives: a state
    belongs to the store key it was saved under too."""
    cfg = config("truncation", full_zone_turns=3)
    key = MemoryKey("t", "u", "moved")
    where = stm_provider.key_for_storage(key)
    a = await make_memory(cfg, key=key)
    await a.add_turn(turn(5, pad=6))
    await a.persist(stm_store, where)
    elsewhere = f"{where}-copy"
    await stm_store.save_memory_state(elsewhere, await stm_store.load_memory_state(where))
    b = await make_memory(cfg, key=key)
    await b.hydrate(stm_store, elsewhere)
    assert _marker_free(await memory_view(b), "u5xxxxxx"), (
        "KEY-007: hydrate loaded a state from a store key it was not saved under"
    )


# -- resolution (KEY-003..006): backends that resolve keys expose ``resolve_key`` ----------


def _resolver(provider: Any) -> Any:
    resolve = getattr(provider, "resolve_key", None)
    if resolve is None:
        pytest.skip("provider has no resolve_key")
    return resolve


@req("KEY-003")
@cap("key_resolution")
def test_explicit_key_wins(stm_provider):
    resolve = _resolver(stm_provider)
    explicit = MemoryKey("t1", "u1", "s1")
    got = resolve(MemoryIsolation(), explicit, {"tenant_id": "t2", "session_id": "s2"})
    assert got == explicit
    # With no tool_context at all, or one that resolves nothing, the explicit key still wins.
    for context in (None, {}, SimpleNamespace()):
        for require_explicit_key in (True, False):
            got = resolve(
                MemoryIsolation(require_explicit_key=require_explicit_key), explicit, context
            )
            assert got == explicit, (
                f"KEY-003: with tool_context={context!r} the explicit key {explicit!r} gave {got!r}"
            )
    # Nor does a tool_context that could not resolve a key (a part of an unusable type, a
    # path one level short: KEY-005) stand in its way: it is not looked at.
    for context in (
        {"session_id": {"id": "s"}},
        {"tenant_id": 1.5, "user_id": True, "session_id": b"s"},
        SimpleNamespace(tenant_id="t", user_id="u", session_id=SimpleNamespace(id="s")),
    ):
        got = resolve(MemoryIsolation(), explicit, context)
        assert got == explicit, (
            f"KEY-003: with tool_context={context!r}, whose parts resolve nothing, the "
            f"explicit key {explicit!r} gave {got!r}"
        )


@req("KEY-003")
@cap("key_resolution")
@pytest.mark.parametrize(
    "parts",
    [
        ("t1", "u1", ""),
        ("t1", "u1", "  "),
        ("t1", "u1", "\t"),
        ("", "", "s1"),
        ("", " ", ""),
        ("default", "anonymous", "s1"),  # the defaults' values, given: not placeholders
    ],
    ids=[
        "empty-session",
        "blank-session",
        "tab-session",
        "empty-tenant-user",
        "all-blank",
        "default-values",
    ],
)
@pytest.mark.parametrize("require_explicit_key", [False, True])
def test_explicit_key_with_blank_parts_wins(stm_provider, parts, require_explicit_key):
    """The blank-session rule (KEY-005) is about resolving from ``tool_context``: an
    explicit key is used as given, empty or blank parts included."""
    resolve = _resolver(stm_provider)
    explicit = MemoryKey(*parts)
    iso = MemoryIsolation(require_explicit_key=require_explicit_key)
    got = resolve(iso, explicit, {"tenant_id": "t2", "user_id": "u2", "session_id": "s2"})
    assert got == explicit, f"KEY-003: the explicit key {explicit!r} lost to tool_context: {got!r}"


@req("KEY-004")
@cap("key_resolution")
def test_keys_come_from_tool_context_dotted_paths(stm_provider):
    resolve = _resolver(stm_provider)
    iso = MemoryIsolation(tenant_key="org.id", user_key="who.id", session_key="conv.id")
    got = resolve(iso, None, {"org": {"id": "acme"}, "who": {"id": "ann"}, "conv": {"id": "c9"}})
    assert got == MemoryKey("acme", "ann", "c9")
    # A path is steps, not one flat key spelled with dots: "conv.id" beside "conv" is not it.
    decoys = {"org": {"id": "acme"}, "who": {"id": "ann"}, "conv": {"id": "c9"}}
    got = resolve(iso, None, {**decoys, "org.id": "x", "who.id": "y", "conv.id": "z"})
    assert got == MemoryKey("acme", "ann", "c9"), (
        f"KEY-004: keys spelled like the dotted paths ('conv.id': 'z') beside the nested "
        f"values the paths lead to resolved {got}"
    )
    # Alone, such keys are no fallback: the paths lead nowhere, and no part comes from them
    # (nothing resolves; an ephemeral key of no part of theirs is KEY-006's to judge).
    flat = {"org.id": "x", "who.id": "y", "conv.id": "z"}
    got = resolve(iso, None, flat)
    taken = set() if got is None else {got.tenant_id, got.user_id, got.session_id} & {"x", "y", "z"}
    assert not taken, (
        f"KEY-004: a tool_context holding only keys spelled like the dotted paths ({flat!r}), "
        f"where the paths lead nowhere, resolved {got}"
    )
    # The spec names attributes too: a request context is often an object, not a mapping.
    objects = {
        "org": SimpleNamespace(id="acme"),
        "who": {"id": "ann"},
        "conv": SimpleNamespace(id="c9"),
    }
    got = resolve(iso, None, objects)
    assert got == MemoryKey("acme", "ann", "c9"), (
        f"dotted paths through attributes (SimpleNamespace(id=...)) resolved {got}"
    )
    got = resolve(iso, None, SimpleNamespace(**objects))
    assert got == MemoryKey("acme", "ann", "c9"), f"a tool_context that is an object resolved {got}"
    # Paths of any depth, through mappings and attributes alike.
    deep = MemoryIsolation(
        tenant_key="req.org.id", user_key="req.auth.user.id", session_key="req.conv.thread.id"
    )
    ctx = {
        "req": SimpleNamespace(
            org={"id": "acme"},
            auth=SimpleNamespace(user={"id": "ann"}),
            conv={"thread": SimpleNamespace(id="c9")},
        )
    }
    got = resolve(deep, None, ctx)
    assert got == MemoryKey("acme", "ann", "c9"), f"KEY-004: paths 3 and 4 deep resolved {got}"
    # Nested *mappings*: any Mapping, not only dict (a read-only view, a ChainMap).
    views = MappingProxyType(
        {
            "org": ChainMap({"id": "acme"}),
            "who": MappingProxyType({"id": "ann"}),
            "conv": ChainMap({}, {"id": "c9"}),
        }
    )
    got = resolve(iso, None, views)
    assert got == MemoryKey("acme", "ann", "c9"), (
        f"KEY-004: dotted paths through mappings that are not dicts (MappingProxyType, "
        f"ChainMap) resolved {got}"
    )


@scenario("direction:accept", "direction:reject")
@req("KEY-005")
@cap("key_resolution")
@pytest.mark.parametrize(
    "session",
    [None, "", "   ", "\u00a0", "\u3000\u2009", "\u2028\t"],
    ids=["missing", "empty", "spaces", "no-break-space", "ideographic-thin", "line-separator"],
)
def test_defaults_only_with_a_session(stm_provider, session):
    resolve = _resolver(stm_provider)
    ctx = {"tenant_id": "t"} if session is None else {"tenant_id": "t", "session_id": session}
    assert resolve(MemoryIsolation(require_explicit_key=True), None, ctx) is None
    assert resolve(MemoryIsolation(), None, {"session_id": "s"}) == MemoryKey(
        "default", "anonymous", "s"
    )


@scenario("direction:accept")
@req("KEY-005")
@cap("key_resolution")
def test_parts_are_stripped_strings_or_integers(stm_provider):
    """Surrounding whitespace is not part of a key part, an integer (0 included) names the
    part by its digits, and a blank tenant or user takes its default."""
    resolve = _resolver(stm_provider)
    iso = MemoryIsolation(require_explicit_key=True)
    blank = {"tenant_id": "\u3000", "user_id": "", "session_id": "\u00a0s\u2028"}
    unicode = {"tenant_id": None, "user_id": None, "session_id": "séssion-🦜"}
    cases = [
        (
            {"tenant_id": " acme\t", "user_id": "\nann ", "session_id": "  c9 "},
            ("acme", "ann", "c9"),
        ),
        ({"tenant_id": 7, "user_id": 0, "session_id": 42}, ("7", "0", "42")),
        # 0 is falsy: a resolver that tests the raw value for "no session" drops it.
        ({"tenant_id": 0, "user_id": 0, "session_id": 0}, ("0", "0", "0")),
        (blank, ("default", "anonymous", "s")),
        (unicode, ("default", "anonymous", "séssion-🦜")),
    ]
    for ctx, parts in cases:
        got = resolve(iso, None, ctx)
        assert got == MemoryKey(*parts), (
            f"KEY-005: tool_context {ctx!r} resolved {got!r}, not {MemoryKey(*parts)!r}"
        )


@scenario("direction:reject", "direction:accept")
@req("KEY-005")
@cap("key_resolution")
@pytest.mark.parametrize("part", ["tenant_id", "user_id", "session_id"])
@pytest.mark.parametrize(
    "value",
    [{"id": "acme"}, ["acme"], SimpleNamespace(id="acme"), 1.0, True, b"acme", bytearray(b"s")],
    ids=["mapping", "list", "object", "float", "bool", "bytes", "bytearray"],
)
def test_a_part_of_another_type_resolves_nothing(stm_provider, part, value):
    """A dotted path that reaches a container (one level short) or a float or bool is a
    misconfiguration: the key does not resolve. A default in its place would give every
    tenant (or user) that sends it one shared memory. Bytes (a header value, an ASGI scope
    field) are not text either: decoding them would guess an encoding."""
    resolve = _resolver(stm_provider)
    given = {"tenant_id": "t", "user_id": "u", "session_id": "s"}
    assert resolve(MemoryIsolation(), None, given) == MemoryKey("t", "u", "s"), (
        f"KEY-004: the plain tool_context {given!r} did not resolve (precondition)"
    )
    ctx = {**given, part: value}
    for require_explicit_key in (True, False):
        got = resolve(MemoryIsolation(require_explicit_key=require_explicit_key), None, ctx)
        assert got is None, (
            f"KEY-005: {part}={value!r} (neither a string nor an integer) resolved {got!r} "
            f"with require_explicit_key={require_explicit_key}; a part of another type "
            "resolves nothing, never a default nor its string form"
        )


@scenario("direction:accept", "direction:reject")
@req("KEY-006")
@cap("key_resolution")
def test_nothing_resolvable_disables_memory(stm_provider):
    resolve = _resolver(stm_provider)
    assert resolve(MemoryIsolation(require_explicit_key=True), None, {}) is None
    assert resolve(MemoryIsolation(require_explicit_key=True), None, None) is None
    # A context with other things in it, none a key part, resolves nothing either.
    for ctx in (
        {"request_id": "r1"},
        {"tenant": {"id": "t"}, "user": "u"},
        SimpleNamespace(request_id="r1"),
        # A known caller with no session (KEY-005: none resolves): no session is made up.
        {"tenant_id": "t", "user_id": "u"},
    ):
        got = resolve(MemoryIsolation(require_explicit_key=True), None, ctx)
        assert got is None, (
            f"KEY-006: tool_context {ctx!r} resolves no session, yet resolved {got!r} with "
            "require_explicit_key=True"
        )
    # The other side: a fully resolvable tool_context still gives its key.
    ctx = {"tenant_id": "t", "user_id": "u", "session_id": "s"}
    got = resolve(MemoryIsolation(require_explicit_key=True), None, ctx)
    assert got == MemoryKey("t", "u", "s"), f"a resolvable tool_context was refused: {got}"


@req("KEY-001")
@cap("rolling_summary")
async def test_health_of_one_key_is_independent_of_another(make_memory):
    cfg = config(full_zone_turns=1, retry_backoff_base_s=30.0)
    failing, healthy = ScriptedSummarizer(), ScriptedSummarizer()
    failing.fail_always("raise")
    a = await make_memory(cfg, key=MemoryKey("tenant-a", "u", "s"), summarizer=failing)
    b = await make_memory(cfg, key=MemoryKey("tenant-b", "u", "s"), summarizer=healthy)
    for i in range(3):
        await a.add_turn(turn(i))
        await b.add_turn(turn(100 + i))
    # Kept apart first: two keys sharing one state (KEY-001) could show any health.
    shown_a, shown_b = json.dumps(await memory_view(a)), json.dumps(await memory_view(b))
    assert "u102" not in shown_a, (
        f"KEY-001: keys of two tenants share their turns: A shows {shown_a}, B {shown_b}"
    )
    await failing.wait_for_calls(1)
    await eventually(
        lambda: a.health.value == "retry", what="HLT-002: key A in RETRY (precondition)"
    )
    assert b.health.value != "retry", "KEY-001: key B is in RETRY with key A's failures"
    await b.flush()
    assert b.health.value == "healthy", "key A's summarizer failures changed key B's health"
