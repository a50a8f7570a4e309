"""Canonical JSON and token counting of a memory's view.

Budgets are enforced on every ``add_turn``. Re-serialising the whole view each time would
cost O(retained turns) per turn, so every turn is serialised once (its *fragment*) and the
view's canonical JSON length is kept as running sums. Estimators that depend on the text's
length only (the default one) then count in O(1); any other estimator is applied to the
view's text, rebuilt by joining cached fragments (O(view), which the budget bounds).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any

from .types import TokenEstimator, default_token_estimator

__all__ = [
    "LengthBasedEstimator",
    "TokenMeter",
    "canonical_json",
    "json_string",
]


# One encoder made once: ``json.dumps(**options)`` builds a new one on every call.
_CANONICAL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def canonical_json(value: Any) -> str:
    """The canonical JSON of a view: what ``estimate_tokens()`` measures (BUD-008)."""
    return _CANONICAL.encode(value)


def json_string(text: str) -> str:
    """``text`` as a JSON string literal, non-ASCII kept (as ``json.dumps`` with
    ``ensure_ascii=False``)."""
    return encode_basestring(text)


@dataclass(frozen=True, slots=True)
class LengthBasedEstimator:
    """An estimator that depends only on ``len(text)``: counted in O(1) from cached lengths.

    ``LengthBasedEstimator(4)`` is equivalent to :func:`default_token_estimator`.
    """

    chars_per_token: int = 4

    def __post_init__(self) -> None:
        if self.chars_per_token <= 0:
            raise ValueError("chars_per_token must be > 0")

    def __call__(self, text: str) -> int:
        return self.from_length(len(text))

    def from_length(self, length: int) -> int:
        return length // self.chars_per_token + 1


# Literal pieces of the canonical view; their lengths are the constants of the running sums.
_OPEN = '{"conversation_memory":{'
_PENDING_OPEN = '"pending_turns":['
_RECENT_OPEN = '"recent_turns":['
_SUMMARY_KEY = ',"summary":'
_CLOSE = "}}"


def _list_length(count: int, chars: int) -> int:
    return chars + max(0, count - 1)


@dataclass(frozen=True, slots=True)
class TokenMeter:
    """Counts the tokens of a view from its parts, fast where the estimator allows."""

    estimator: TokenEstimator
    from_length: Callable[[int], int] | None

    @classmethod
    def for_estimator(cls, estimator: TokenEstimator | None) -> TokenMeter:
        if estimator is None or estimator is default_token_estimator:
            return cls(default_token_estimator, LengthBasedEstimator(4).from_length)
        if isinstance(estimator, LengthBasedEstimator):
            return cls(estimator, estimator.from_length)
        return cls(estimator, None)

    def text_size(self, text: str) -> int:
        """Size of a summary: 0 for ``""``, else the estimator's count."""
        return self.estimator(text) if text else 0

    def view_tokens(
        self,
        summary_json: str | None,
        pending: tuple[int, int, Callable[[], Iterable[str]]] | None,
        recent: tuple[int, int, Callable[[], Iterable[str]]],
    ) -> int:
        """Tokens of a ``conversation_memory`` view.

        ``pending`` and ``recent`` are ``(count, fragment_chars, fragments)``; ``fragments``
        is only called for estimators that need the text. ``pending`` is ``None`` or has
        count 0 when no pending turn is visible; ``summary_json`` is ``None`` when absent.
        """
        if self.from_length is not None:
            length = len(_OPEN) + len(_RECENT_OPEN) + 1 + _list_length(recent[0], recent[1])
            if pending is not None and pending[0]:
                length += len(_PENDING_OPEN) + 2 + _list_length(pending[0], pending[1])
            if summary_json is not None:
                length += len(_SUMMARY_KEY) + len(summary_json)
            return self.from_length(length + len(_CLOSE))
        parts = [_OPEN]
        if pending is not None and pending[0]:
            parts += [_PENDING_OPEN, ",".join(pending[2]()), "],"]
        parts += [_RECENT_OPEN, ",".join(recent[2]()), "]"]
        if summary_json is not None:
            parts += [_SUMMARY_KEY, summary_json]
        parts.append(_CLOSE)
        return self.estimator("".join(parts))
