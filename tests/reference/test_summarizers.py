"""Tests of reference_impl.summarizers: the rule-based and the LLM-backed summarizer."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl.summarizers import (
    RuleBasedSummarizer,
    SummarizerOutputError,
    _one_line,
    _unwrap_summary_lines,
    build_summary_messages,
    llm_summarizer,
    parse_summary_reply,
)
from reference_impl.types import default_token_estimator


def _turn(user: str, assistant: str, tools: list[str] | None = None) -> dict[str, Any]:
    turn: dict[str, Any] = {"user": user, "assistant": assistant}
    if tools is not None:
        turn["trajectory_digest"] = {
            "tools_invoked": tools,
            "observations_summary": "obs",
            "reasoning_summary": None,
            "artifacts_refs": [],
        }
    return turn


def _payload(turns: list[dict[str, Any]], previous: str = "") -> dict[str, Any]:
    return {"previous_summary": previous, "turns": turns}


def _word_count(text: str) -> int:
    return len(text.split())


def _erratic(text: str) -> int:
    # Deliberately non-monotonic in the text length.
    return (len(text) * 7919) % 53


ESTIMATORS: list[Callable[[str], int]] = [default_token_estimator, len, _word_count, _erratic]

# ----------------------------------------------------------------------- rule-based


# Text made of what the two helpers below treat specially: tags, their pieces, every kind
# of line break and of whitespace str.splitlines and str.split know, and plain letters.
_PIECES = st.sampled_from(
    ["<session_summary>", "</session_summary>", "<session_", "summary>", "</", "\r", "\n",
     "\r\n", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029", " ", "\t", "\xa0",
     "\u3000", "\u200b", "a", "é", "😀"]
)  # fmt: skip
_TEXT = st.lists(_PIECES, max_size=40).map("".join)


@given(_TEXT)
@settings(max_examples=300, deadline=None)
def test_one_line_collapses_whitespace_as_the_regex_reading_does(text: str) -> None:
    assert _one_line(text) == re.sub(r"\s+", " ", text).strip()


@given(_TEXT)
@settings(max_examples=300, deadline=None)
def test_unwrapped_lines_are_the_non_blank_lines_without_tags(text: str) -> None:
    by_line = []
    for raw in text.splitlines():
        for tag in ("<session_summary>", "</session_summary>"):
            raw = raw.replace(tag, "")
        if raw.strip():
            by_line.append(raw.strip())
    assert _unwrap_summary_lines(text) == by_line


@pytest.mark.anyio
async def test_one_line_per_turn_with_tools() -> None:
    summarizer = RuleBasedSummarizer()
    result = await summarizer(
        _payload(
            [
                _turn("What is the weather in Paris? Also Rome.", "Sunny, 21°C.", ["weather"]),
                _turn("Thanks!\nBye", "You're welcome."),
            ]
        )
    )
    assert set(result) == {"summary"}
    assert result["summary"].splitlines() == [
        "- user asked: What is the weather in Paris?; assistant: Sunny, 21°C.; tools: weather",
        "- user asked: Thanks!; assistant: You're welcome.",
    ]


@pytest.mark.anyio
async def test_fields_are_clipped_and_tools_deduplicated() -> None:
    summarizer = RuleBasedSummarizer(max_field_chars=10)
    result = await summarizer(
        _payload([_turn("a" * 50, "b  c\n d " * 10, ["search", "search", "fetch"])])
    )
    assert result["summary"] == (
        "- user asked: aaaaaaaaa…; assistant: b c d b c…; tools: search, f…"
    )


@pytest.mark.anyio
async def test_deterministic() -> None:
    payload = _payload(
        [_turn(f"question {i}. more", f"answer {i}", ["tool"]) for i in range(8)],
        previous="- earlier fact",
    )
    first = await RuleBasedSummarizer(max_tokens=40)(payload)
    second = await RuleBasedSummarizer(max_tokens=40)(payload)
    third = await RuleBasedSummarizer(max_tokens=40)(json.loads(json.dumps(payload)))
    assert first == second == third


@pytest.mark.anyio
async def test_previous_summary_facts_kept_before_new_turns() -> None:
    previous = "- user asked: my name is Ada; assistant: noted\n- user prefers metric units"
    result = await RuleBasedSummarizer()(_payload([_turn("Convert 5 miles", "8 km")], previous))
    assert result["summary"].splitlines() == [
        "- user asked: my name is Ada; assistant: noted",
        "- user prefers metric units",
        "- user asked: Convert 5 miles; assistant: 8 km",
    ]


@pytest.mark.anyio
async def test_session_summary_tags_are_dropped_from_previous_summary() -> None:
    previous = (
        "<session_summary>\nUser is Ada.\n<key_facts>\n- id 42\n</key_facts>\n</session_summary>"
    )
    result = await RuleBasedSummarizer()(_payload([], previous))
    assert result["summary"].splitlines() == [
        "User is Ada.",
        "<key_facts>",
        "- id 42",
        "</key_facts>",
    ]


@pytest.mark.anyio
async def test_oldest_lines_dropped_first() -> None:
    turns = [_turn(f"q{i}", f"a{i}") for i in range(6)]
    lines = [f"- user asked: q{i}; assistant: a{i}" for i in range(6)]
    previous = "- fact from the previous summary"
    # A budget measured in characters that fits exactly the last three turn lines.
    budget = len("\n".join(lines[3:]))
    summarizer = RuleBasedSummarizer(max_tokens=budget, token_estimator=len)
    result = await summarizer(_payload(turns, previous))
    assert result["summary"] == "\n".join(lines[3:])


@pytest.mark.anyio
async def test_single_line_too_long_is_clipped() -> None:
    summarizer = RuleBasedSummarizer(max_tokens=20, token_estimator=len)
    result = await summarizer(_payload([_turn("old", "x"), _turn("tell me everything", "ok")]))
    summary = result["summary"]
    assert summary == "- user asked: tell…"
    assert len(summary) <= 20


@pytest.mark.anyio
async def test_zero_budget_gives_empty_summary() -> None:
    # default_token_estimator("") == 1, so "" is the only summary of size <= 0.
    result = await RuleBasedSummarizer(max_tokens=0)(_payload([_turn("hi", "hello")], "fact"))
    assert result == {"summary": ""}
    assert RuleBasedSummarizer().size("") == 0


@pytest.mark.anyio
async def test_empty_payload_gives_empty_summary() -> None:
    assert await RuleBasedSummarizer()(_payload([])) == {"summary": ""}
    assert await RuleBasedSummarizer()({"turns": []}) == {"summary": ""}


turn_text = st.text(st.characters(codec="utf-8"), max_size=300)
digest = st.none() | st.fixed_dictionaries(
    {
        "tools_invoked": st.lists(st.text(max_size=20), max_size=4),
        "observations_summary": st.text(max_size=40),
    }
)
turns_strategy = st.lists(
    st.fixed_dictionaries(
        {"user": turn_text, "assistant": turn_text}, optional={"trajectory_digest": digest}
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    turns=turns_strategy,
    previous=st.text(max_size=600),
    max_tokens=st.integers(min_value=0, max_value=400),
    estimator=st.sampled_from(ESTIMATORS),
    max_field_chars=st.integers(min_value=1, max_value=250),
)
def test_budget_is_never_exceeded(
    turns: list[dict[str, Any]],
    previous: str,
    max_tokens: int,
    estimator: Callable[[str], int],
    max_field_chars: int,
) -> None:
    summarizer = RuleBasedSummarizer(
        max_tokens=max_tokens, token_estimator=estimator, max_field_chars=max_field_chars
    )
    payload = _payload(turns, previous)
    result = anyio.run(summarizer, payload)
    summary = result["summary"]
    assert isinstance(summary, str)
    assert summarizer.size(summary) <= max_tokens
    assert anyio.run(summarizer, payload) == result
    # The newest turn survives whenever its full line fits on its own.
    if turns:
        newest = summarizer._turn_line(turns[-1])
        if summarizer.size(newest) <= max_tokens:
            assert summary.endswith(newest)


def _keep_most_newest(summarizer: RuleBasedSummarizer, lines: list[str]) -> str:
    """The obvious quadratic rule the summarizer implements faster: drop the oldest lines
    until the rest fits."""
    for start in range(len(lines)):
        text = "\n".join(lines[start:])
        if summarizer.size(text) <= summarizer.max_tokens:
            return text
    return summarizer._clip_to_budget(lines[-1]) if lines else ""


@settings(max_examples=150, deadline=None)
@given(
    turns=turns_strategy,
    previous=st.text(max_size=600),
    max_tokens=st.integers(min_value=0, max_value=400),
    estimator=st.sampled_from([default_token_estimator, len, _word_count]),
)
def test_keeps_as_many_newest_lines_as_fit_with_a_monotonic_estimator(
    turns: list[dict[str, Any]], previous: str, max_tokens: int, estimator: Callable[[str], int]
) -> None:
    summarizer = RuleBasedSummarizer(max_tokens=max_tokens, token_estimator=estimator)
    payload = _payload(turns, previous)
    lines = [*_unwrap_summary_lines(previous), *(summarizer._turn_line(t) for t in turns)]
    assert summarizer.summarize(payload) == _keep_most_newest(summarizer, lines)


@pytest.mark.anyio
async def test_a_huge_batch_yields_to_the_event_loop() -> None:
    summarizer = RuleBasedSummarizer(max_tokens=200)
    turns = [_turn(f"question {i}.", f"answer {i}") for i in range(5000)]
    ticks = 0
    done = False

    async def count() -> None:
        nonlocal ticks
        while not done:
            await anyio.lowlevel.checkpoint()
            ticks += 1

    async with anyio.create_task_group() as group:
        group.start_soon(count)
        await anyio.lowlevel.checkpoint()
        before = ticks
        result = await summarizer(_payload(turns))
        done = True
    assert ticks - before >= 5000 // 200 - 1, "formatting the batch never yielded"
    assert result["summary"].endswith(summarizer._turn_line(turns[-1]))
    assert result == {"summary": summarizer.summarize(_payload(turns))}


MALFORMED: list[tuple[Any, str]] = [
    ("not a mapping", "must be a mapping"),
    (["turns"], "must be a mapping"),
    ({"previous_summary": ""}, "'turns' is missing"),
    ({"previous_summary": None, "turns": []}, "previous_summary must be a str"),
    ({"previous_summary": 3, "turns": []}, "previous_summary must be a str"),
    ({"turns": "abc"}, "turns must be a list"),
    ({"turns": {"user": "a", "assistant": "b"}}, "turns must be a list"),
    ({"turns": ["hello"]}, r"turns\[0\] must be a mapping"),
    ({"turns": [{"assistant": "b"}]}, r"turns\[0\].user is missing"),
    ({"turns": [{"user": "a"}]}, r"turns\[0\].assistant is missing"),
    ({"turns": [{"user": 1, "assistant": "b"}]}, r"turns\[0\].user must be a str"),
    ({"turns": [{"user": "a", "assistant": None}]}, r"turns\[0\].assistant must be a str"),
    (
        {"turns": [_turn("a", "b"), {"user": "a", "assistant": "b", "trajectory_digest": "x"}]},
        r"turns\[1\].trajectory_digest must be a mapping",
    ),
    (
        {"turns": [{"user": "a", "assistant": "b", "trajectory_digest": {"tools_invoked": "t"}}]},
        "tools_invoked must be a list",
    ),
    (
        {"turns": [{"user": "a", "assistant": "b", "trajectory_digest": {"tools_invoked": [1]}}]},
        r"tools_invoked\[0\] must be a str",
    ),
    (
        {"turns": [{"user": "a", "assistant": "b", "trajectory_digest": {"reasoning_summary": 5}}]},
        "reasoning_summary must be a str",
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("payload", "message"), MALFORMED)
async def test_malformed_payload_rejected(payload: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        await RuleBasedSummarizer()(payload)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_tokens": -1}, ValueError),
        ({"max_tokens": True}, TypeError),
        ({"max_tokens": 1.5}, TypeError),
        ({"max_field_chars": 0}, ValueError),
        ({"token_estimator": "len"}, TypeError),
    ],
)
def test_invalid_configuration(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        RuleBasedSummarizer(**kwargs)


# ------------------------------------------------------------------------------ LLM


class FakeCompletion:
    """Records the messages it receives and answers with a canned reply."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.calls: list[list[dict[str, str]]] = []

    async def __call__(self, messages: list[dict[str, str]]) -> Any:
        self.calls.append(messages)
        return self.reply


PAYLOAD = _payload(
    [
        _turn("Book a table for 4 at 8pm", "Booked at Chez Ada, ref R-1234.", ["book_table"]),
        _turn("Quel temps fera-t-il ? 🌧", "Pluie légère."),
    ],
    previous="<session_summary>\nUser lives in Lyon.\n</session_summary>",
)


@pytest.mark.anyio
async def test_llm_valid_json_is_wrapped() -> None:
    complete = FakeCompletion(json.dumps({"summary": "User booked table R-1234."}))
    result = await llm_summarizer(complete)(PAYLOAD)
    assert result == {"summary": "<session_summary>\nUser booked table R-1234.\n</session_summary>"}
    assert len(complete.calls) == 1


@pytest.mark.anyio
async def test_llm_already_wrapped_summary_is_kept() -> None:
    text = "<session_summary>\nx\n<key_facts>\n- ref R-1234\n</key_facts>\n</session_summary>"
    complete = FakeCompletion(json.dumps({"summary": f"  {text}\n"}))
    assert await llm_summarizer(complete)(PAYLOAD) == {"summary": text}


@pytest.mark.anyio
async def test_llm_empty_summary_normalised_like_penguiflow() -> None:
    complete = FakeCompletion('{"summary": "   "}')
    result = await llm_summarizer(complete)(PAYLOAD)
    assert result == {"summary": "<session_summary></session_summary>"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    "reply",
    [
        '```json\n{"summary": "fenced"}\n```',
        '  ```\n{"summary": "fenced"}\n```  \n',
        '```JSON\n{"summary": "fenced"}```',
        '{"summary": "fenced", "confidence": 0.9}',
    ],
)
async def test_llm_fenced_or_extra_keys_accepted(reply: str) -> None:
    result = await llm_summarizer(FakeCompletion(reply))(PAYLOAD)
    assert result == {"summary": "<session_summary>\nfenced\n</session_summary>"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    "reply",
    [
        "Here is the summary: the user booked a table.",
        '{"summary": "unterminated',
        "",
        '```json\n{"summary": \n```',
    ],
)
async def test_llm_invalid_json_rejected(reply: str) -> None:
    with pytest.raises(SummarizerOutputError, match="not JSON"):
        await llm_summarizer(FakeCompletion(reply))(PAYLOAD)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "reply",
    [
        '{"text": "wrong key"}',
        '{"summary": 42}',
        '{"summary": null}',
        '{"summary": ["a", "b"]}',
        '["summary"]',
        '"just a string"',
    ],
)
async def test_llm_wrong_schema_rejected(reply: str) -> None:
    with pytest.raises(SummarizerOutputError):
        await llm_summarizer(FakeCompletion(reply))(PAYLOAD)


@pytest.mark.anyio
async def test_llm_non_string_reply_rejected() -> None:
    with pytest.raises(SummarizerOutputError, match="expected str"):
        await llm_summarizer(FakeCompletion({"summary": "dict, not text"}))(PAYLOAD)


@pytest.mark.anyio
async def test_llm_over_budget_rejected() -> None:
    complete = FakeCompletion(json.dumps({"summary": "word " * 100}))
    summarizer = llm_summarizer(complete, max_tokens=50)
    with pytest.raises(SummarizerOutputError, match="max_tokens=50"):
        await summarizer(PAYLOAD)
    # The bound applies to the wrapped text, measured with the given estimator.
    within = llm_summarizer(complete, max_tokens=110, token_estimator=_word_count)
    assert (await within(PAYLOAD))["summary"].startswith("<session_summary>\nword")
    assert issubclass(SummarizerOutputError, ValueError)


@pytest.mark.anyio
async def test_llm_prompt_contains_previous_summary_and_turns() -> None:
    complete = FakeCompletion('{"summary": "ok"}')
    await llm_summarizer(complete, max_tokens=321)(PAYLOAD)
    (messages,) = complete.calls
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    assert '{"summary":' in system
    assert "JSON only" in system
    assert "<session_summary>" in system
    assert "321" in system
    data = json.loads(user)
    assert data == {"previous_summary": PAYLOAD["previous_summary"], "turns": PAYLOAD["turns"]}
    # Non-ASCII content is sent as is, not escaped.
    assert "🌧" in user
    assert "légère" in user


@pytest.mark.anyio
async def test_llm_malformed_payload_rejected_before_calling_the_model() -> None:
    complete = FakeCompletion('{"summary": "ok"}')
    with pytest.raises(ValueError, match="turns must be a list"):
        await llm_summarizer(complete)({"previous_summary": "", "turns": None})
    assert complete.calls == []


def test_llm_invalid_configuration() -> None:
    complete = FakeCompletion("")
    with pytest.raises(ValueError):
        llm_summarizer(complete, max_tokens=-1)
    with pytest.raises(TypeError):
        llm_summarizer(complete, max_tokens=True)


def test_build_messages_and_parse_reply_are_usable_directly() -> None:
    messages = build_summary_messages("prev", [_turn("u", "a")], max_tokens=10)
    assert json.loads(messages[1]["content"])["previous_summary"] == "prev"
    assert parse_summary_reply('```json\n{"summary": "s"}\n```') == "s"
    with pytest.raises(SummarizerOutputError):
        parse_summary_reply("nope")
