"""Summarizers for ``strategy="rolling_summary"``.

A summarizer is an async callable ``summarizer(payload) -> {"summary": str}`` where::

    payload = {
        "previous_summary": str,
        "turns": [{"user": str, "assistant": str, "trajectory_digest"?: {...}}, ...],
    }

which is exactly what PenguiFlow's ``DefaultShortTermMemory`` sends. Two are provided:

* :class:`RuleBasedSummarizer`: deterministic and dependency-free, for demos and tests;
* :func:`llm_summarizer`: wraps any async chat-completion callable, with PenguiFlow's
  prompt style and ``<session_summary>`` output.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from reference_impl.types import TokenEstimator, default_token_estimator

__all__ = [
    "ChatCompletion",
    "RuleBasedSummarizer",
    "SummarizerOutputError",
    "SummaryFunction",
    "build_summary_messages",
    "llm_summarizer",
    "parse_summary_reply",
]

#: Async chat completion: OpenAI-style ``[{"role": ..., "content": ...}]`` in, reply text out.
ChatCompletion = Callable[[list[dict[str, str]]], Awaitable[str]]
#: What both summarizers are: usable wherever a ``Summarizer`` is expected.
SummaryFunction = Callable[[Any], Awaitable[dict[str, str]]]

_ELLIPSIS = "…"
#: Turns a summarizer call formats between two yields to the event loop.
_CHUNK = 200
_SUMMARY_TAGS = ("<session_summary>", "</session_summary>")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_FENCED = re.compile(r"\A\s*```[\w-]*[ \t]*\n(?P<body>.*?)\n?[ \t]*```\s*\Z", re.DOTALL)


class SummarizerOutputError(ValueError):
    """The model's reply is not valid ``{"summary": str}`` JSON or exceeds the budget."""


# --------------------------------------------------------------------------- payload


def _require_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"summarizer payload: {where} must be a str, got {type(value).__name__}")
    return value


def _validate_digest(digest: Any, where: str) -> None:
    if digest is None:
        return
    if not isinstance(digest, Mapping):
        raise ValueError(
            f"summarizer payload: {where} must be a mapping or None, got {type(digest).__name__}"
        )
    for key in ("tools_invoked", "artifacts_refs"):
        items = digest.get(key, [])
        if not isinstance(items, list | tuple):
            raise ValueError(f"summarizer payload: {where}.{key} must be a list of str")
        for index, item in enumerate(items):
            _require_str(item, f"{where}.{key}[{index}]")
    if "observations_summary" in digest:
        _require_str(digest["observations_summary"], f"{where}.observations_summary")
    if digest.get("reasoning_summary") is not None:
        _require_str(digest["reasoning_summary"], f"{where}.reasoning_summary")


def _validate_payload(payload: Any) -> tuple[str, list[Mapping[str, Any]]]:
    """Return ``(previous_summary, turns)`` or raise ``ValueError`` naming the bad field."""
    if not isinstance(payload, Mapping):
        raise ValueError(f"summarizer payload must be a mapping, got {type(payload).__name__}")
    previous = _require_str(payload.get("previous_summary", ""), "previous_summary")
    if "turns" not in payload:
        raise ValueError("summarizer payload: 'turns' is missing")
    turns = payload["turns"]
    if not isinstance(turns, list | tuple):
        raise ValueError(f"summarizer payload: turns must be a list, got {type(turns).__name__}")
    for index, turn in enumerate(turns):
        where = f"turns[{index}]"
        if not isinstance(turn, Mapping):
            raise ValueError(
                f"summarizer payload: {where} must be a mapping, got {type(turn).__name__}"
            )
        for key in ("user", "assistant"):
            if key not in turn:
                raise ValueError(f"summarizer payload: {where}.{key} is missing")
            _require_str(turn[key], f"{where}.{key}")
        _validate_digest(turn.get("trajectory_digest"), f"{where}.trajectory_digest")
    return previous, list(turns)


# ------------------------------------------------------------------ rule-based summary


def _one_line(text: str) -> str:
    # Runs of whitespace to one space, none at either end: str.split() and re's \s agree
    # on what whitespace is (str.isspace), and splitting is a third of the regex's cost.
    return " ".join(text.split())


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)].rstrip() + _ELLIPSIS


def _first_sentence(text: str) -> str:
    return _SENTENCE_END.split(text, maxsplit=1)[0]


def _unwrap_summary_lines(summary: str) -> list[str]:
    # Tags are dropped so that discarding old lines can never leave an unbalanced tag.
    # No tag holds a line break, so dropping them from the whole text drops what dropping
    # them line by line would (it may join a "\r" and "\n" around a tag: one blank line
    # fewer, and blank lines are dropped), at one call per tag instead of two per line.
    for tag in _SUMMARY_TAGS:
        summary = summary.replace(tag, "")
    lines = []
    for raw in summary.splitlines():
        line = raw.strip()
        if line:
            lines.append(line)
    return lines


@dataclass(frozen=True, slots=True)
class RuleBasedSummarizer:
    """Deterministic summarizer that keeps one line of key facts per turn.

    Each new turn becomes ``- user asked: <first sentence>; assistant: <answer>`` (each
    part whitespace-collapsed and clipped to ``max_field_chars``), plus ``; tools: a, b``
    when its ``trajectory_digest`` lists tools. These lines are appended after the lines
    of ``previous_summary`` (``<session_summary>`` tags removed), oldest first.

    Budget: a summary's size is 0 if it is ``""`` and ``token_estimator(summary)``
    otherwise; it never exceeds ``max_tokens``. The oldest lines are dropped first; if
    even the newest line alone does not fit, it is clipped (ending in ``…``), down to
    ``""`` if need be. The same payload always yields the same summary.
    """

    max_tokens: int = 1000
    token_estimator: TokenEstimator = default_token_estimator
    max_field_chars: int = 200

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_field_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if self.max_tokens < 0:
            raise ValueError("max_tokens must be >= 0")
        if self.max_field_chars < 1:
            raise ValueError("max_field_chars must be >= 1")
        if not callable(self.token_estimator):
            raise TypeError("token_estimator must be callable")

    async def __call__(self, payload: Any) -> dict[str, str]:
        """Summarize ``payload``; raises ``ValueError`` if it is malformed.

        Yields to the event loop every :data:`_CHUNK` turns: a batch of thousands of
        turns (a long outage) must not hold the loop.
        """
        previous, turns = _validate_payload(payload)
        lines = _unwrap_summary_lines(previous)
        for start in range(0, len(turns), _CHUNK):
            if start:
                await asyncio.sleep(0)
            lines.extend(self._turn_line(turn) for turn in turns[start : start + _CHUNK])
        return {"summary": self._fit(lines)}

    def summarize(self, payload: Any) -> str:
        """Synchronous core of :meth:`__call__`."""
        previous, turns = _validate_payload(payload)
        lines = _unwrap_summary_lines(previous)
        lines.extend(self._turn_line(turn) for turn in turns)
        return self._fit(lines)

    def size(self, summary: str) -> int:
        """Size of ``summary`` as bounded by ``max_tokens`` (0 for ``""``)."""
        return 0 if summary == "" else self.token_estimator(summary)

    def _turn_line(self, turn: Mapping[str, Any]) -> str:
        limit = self.max_field_chars
        user = _clip(_first_sentence(_one_line(turn["user"])), limit)
        assistant = _clip(_one_line(turn["assistant"]), limit)
        line = f"- user asked: {user}; assistant: {assistant}"
        digest = turn.get("trajectory_digest")
        if digest:
            tools = [_one_line(tool) for tool in digest.get("tools_invoked", [])]
            tools = [tool for tool in dict.fromkeys(tools) if tool]  # dedupe, keep order
            if tools:
                line += "; tools: " + _clip(", ".join(tools), limit)
        return line

    def _fits(self, text: str) -> bool:
        return self.size(text) <= self.max_tokens

    def _fit(self, lines: Sequence[str]) -> str:
        """The most newest lines that fit, else the newest line clipped.

        Galloping from the newest line, then bisecting: the text measured grows with what
        fits, not with the batch, so a huge batch costs O(n) plus a few measurements of
        the fitting text. Every returned value passed ``_fits``, so the bound holds for any
        estimator; for a monotonic one, no more lines could fit.
        """
        n = len(lines)

        def newest(k: int) -> str:
            return "\n".join(lines[n - k :])

        if n == 0:
            return ""
        if not self._fits(newest(1)):
            return self._clip_to_budget(lines[-1])
        fits, too_many = 1, n + 1
        while fits < n:
            k = min(2 * fits, n)
            if not self._fits(newest(k)):
                too_many = k
                break
            fits = k
        while too_many - fits > 1:  # `fits` only ever moves to a checked, fitting count
            mid = (fits + too_many) // 2
            if self._fits(newest(mid)):
                fits = mid
            else:
                too_many = mid
        return newest(fits)

    def _clip_to_budget(self, line: str) -> str:
        def candidate(keep: int) -> str:
            return "" if keep == 0 else line[:keep].rstrip() + _ELLIPSIS

        # Largest prefix that fits; `low` only ever moves to a checked, fitting length.
        low, high = 0, len(line) - 1
        while low < high:
            mid = (low + high + 1) // 2
            if self._fits(candidate(mid)):
                low = mid
            else:
                high = mid - 1
        return candidate(low)


# ----------------------------------------------------------------------- LLM summary

_SYSTEM_PROMPT = """\
You are a summariser for agent conversation short-term memory.
Your task is to merge the previous summary and the new conversation turns into one \
structured summary that preserves essential context for future interactions.

The summary will be injected into the agent's context window, so it must be:
- Compact (minimize tokens while maximizing information density)
- Factual (no speculation, only what was explicitly discussed)
- Actionable (highlight what's pending and what's been accomplished)

Output format:
- Respond with JSON only, no prose and no code fences: {{"summary": "<your summary string>"}}
- Wrap the summary in <session_summary>...</session_summary> tags
- The summary, tags included, must not exceed {max_tokens} tokens
- Use these optional sections when relevant:

<session_summary>
[1-3 sentence narrative of the conversation flow and current state]

<key_facts>
- [Stable facts, user preferences, constraints, decisions]
- [Entity names, IDs, values that may be referenced later]
</key_facts>

<tools_used>
- [tool_name]: [What it accomplished or returned]
</tools_used>

<pending>
- [Unresolved questions or next steps the user expects]
</pending>
</session_summary>

Guidelines:
- Prioritize recent turns over older ones when space is limited
- Preserve exact values (numbers, IDs, names) rather than paraphrasing
- Omit sections that have no relevant content
- If previous_summary is not empty, integrate it with the new turns (do not repeat verbatim)
"""


class _SummaryReply(BaseModel):
    model_config = ConfigDict(strict=True)

    summary: str


def build_summary_messages(
    previous_summary: str, turns: Sequence[Mapping[str, Any]], *, max_tokens: int
) -> list[dict[str, str]]:
    """Chat messages asking for ``{"summary": ...}`` merging ``previous_summary`` and ``turns``.

    A system message with the instructions and a user message holding the compact JSON
    ``{"previous_summary": ..., "turns": [...]}``, as PenguiFlow builds them.
    """
    data = {"previous_summary": previous_summary, "turns": [dict(turn) for turn in turns]}
    return [
        {"role": "system", "content": _SYSTEM_PROMPT.format(max_tokens=max_tokens)},
        {
            "role": "user",
            "content": json.dumps(data, ensure_ascii=False, sort_keys=True, default=str),
        },
    ]


def _normalise_session_summary(summary: str) -> str:
    # Same rules as PenguiFlow's memory_integration._normalise_session_summary.
    summary = summary.strip()
    if not summary:
        return "<session_summary></session_summary>"
    if "<session_summary>" not in summary:
        return f"<session_summary>\n{summary}\n</session_summary>"
    return summary


def parse_summary_reply(reply: str) -> str:
    """Extract the ``summary`` string of a ``{"summary": str}`` JSON reply.

    Surrounding Markdown code fences (```` ```json ... ``` ````) are tolerated; keys other
    than ``summary`` are ignored.

    Raises:
        SummarizerOutputError: the reply is not such JSON.
    """
    match = _FENCED.match(reply)
    body = match.group("body") if match else reply
    try:
        return _SummaryReply.model_validate_json(body).summary
    except ValidationError as exc:
        raise SummarizerOutputError(
            f'summarizer reply is not JSON of the form {{"summary": "..."}}: {exc}'
        ) from exc


def llm_summarizer(
    complete: ChatCompletion,
    *,
    max_tokens: int = 1000,
    token_estimator: TokenEstimator | None = None,
) -> SummaryFunction:
    """Build a summarizer on top of an async chat-completion callable.

    Each call validates the payload (``ValueError`` if malformed), sends the messages of
    :func:`build_summary_messages` to ``complete``, parses the reply with
    :func:`parse_summary_reply` and wraps the text in ``<session_summary>`` tags unless it
    already contains them (an empty summary becomes
    ``<session_summary></session_summary>``, as in PenguiFlow).

    Args:
        complete: ``await complete(messages)`` returns the model's reply text.
        max_tokens: bound on ``token_estimator(summary)`` of the wrapped summary; should
            match ``MemoryBudget.summary_max_tokens``.
        token_estimator: defaults to :func:`~reference_impl.types.default_token_estimator`.

    Raises (from the returned summarizer):
        ValueError: malformed payload.
        SummarizerOutputError: invalid reply or summary over ``max_tokens``.
    """
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise TypeError(f"max_tokens must be an int, got {type(max_tokens).__name__}")
    if max_tokens < 0:
        raise ValueError("max_tokens must be >= 0")
    estimator = token_estimator or default_token_estimator

    async def summarize(payload: Any) -> dict[str, str]:
        previous, turns = _validate_payload(payload)
        reply = await complete(build_summary_messages(previous, turns, max_tokens=max_tokens))
        if not isinstance(reply, str):
            raise SummarizerOutputError(
                f"chat completion returned {type(reply).__name__}, expected str"
            )
        summary = _normalise_session_summary(parse_summary_reply(reply))
        tokens = estimator(summary)
        if tokens > max_tokens:
            raise SummarizerOutputError(
                f"summary has {tokens} tokens, more than max_tokens={max_tokens}"
            )
        return {"summary": summary}

    return summarize
