"""Canonical JSON and token counting of a memory's view.

Budgets are enforced on every ``add_turn``. Re-serialising the whole view each time would
cost O(retained turns) per turn, so every turn is serialised once (its *fragment*) and
measured once (its *size*), and the view is counted from running sums of sizes:

* a length-based estimator (the default one): a size is a fragment's length, and the view's
  length, hence its count, follows in O(1);
* an estimator that is *additive at word starts* (:func:`tiktoken_estimator`): the count of
  a text is the sum of the counts of its parts when every cut falls where punctuation meets
  a letter. Every key of the canonical view (``assistant``, ``pending_turns``, ...) is such
  a place, so a turn's size is the count of its fragment from its first key up to the next
  turn's, and the view's count is a sum of sizes plus a few short texts at the ends of the
  lists (cached): O(1) per measurement, exact;
* any other estimator is applied to the view's text, rebuilt by joining cached fragments
  (O(view), which the budget bounds).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any, Protocol

from .types import TokenEstimator, default_token_estimator

__all__ = [
    "LengthBasedEstimator",
    "Measured",
    "Part",
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

# The same view cut where a key's first letter follows punctuation (additive estimators):
# ``{"conversation_memory":{"`` | ``pending_turns":[{"`` | ``assistant":...,{"`` | ... |
# ``assistant":...}],"`` | ``recent_turns":[{"`` | ... | ``summary":"..."}}``. A fragment
# is ``{"assistant":...}``; from its first key on it is ``fragment[2:]``.
_HEAD = '{"conversation_memory":{"'
_PENDING_HEAD = 'pending_turns":[{"'
_RECENT_HEAD = 'recent_turns":[{"'
_NEXT_TURN = ',{"'  # a turn followed by another
_NEXT_KEY = '],"'  # the last turn of a list followed by the next key
_END = "]}}"  # the last recent turn, no summary
_SUMMARY_HEAD = 'summary":'
#: How many measured texts an additive meter remembers (ends of lists, summaries).
_CACHE_SIZE = 512


_FIXED_LENGTH = len(_OPEN) + len(_RECENT_OPEN) + 1 + len(_CLOSE)
_PENDING_LENGTH = len(_PENDING_OPEN) + 2


def _list_length(count: int, chars: int) -> int:
    return chars + max(0, count - 1)


class Measured(Protocol):
    """A turn as the meter sees it: its fragment and its size (an ``Entry``)."""

    @property
    def fragment(self) -> str: ...

    @property
    def size(self) -> int: ...


class Part(tuple[int, int, Callable[[], Iterable[str]], Callable[[], Measured]]):
    """One list of turns in a view: ``(count, size, fragments, last)``.

    ``size`` is the sum of the turns' sizes (:meth:`TokenMeter.entry_size`); ``fragments``
    and ``last`` (the newest turn) are only called when the text is needed.
    """

    __slots__ = ()

    def __new__(
        cls,
        count: int,
        size: int,
        fragments: Callable[[], Iterable[str]],
        last: Callable[[], Measured],
    ) -> Part:
        return tuple.__new__(cls, (count, size, fragments, last))


def _counting(estimator: TokenEstimator) -> TokenEstimator:
    """``estimator``, refusing what is no count of tokens: a NaN or a negative count, which
    every budget comparison would misjudge (NaN fits nothing and exceeds nothing)."""

    def count(text: str) -> int:
        tokens = estimator(text)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise TypeError(
                f"token_estimator returned {tokens!r} for a text of {len(text)} characters; "
                "a count of tokens is an int >= 0"
            )
        return tokens

    return count


@dataclass(frozen=True, slots=True)
class TokenMeter:
    """Counts the tokens of a view from its parts, fast where the estimator allows."""

    estimator: TokenEstimator
    from_length: Callable[[int], int] | None
    #: The estimator is additive at word starts (see the module's documentation).
    additive: bool = False
    _counts: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def for_estimator(cls, estimator: TokenEstimator | None) -> TokenMeter:
        if estimator is None or estimator is default_token_estimator:
            return cls(default_token_estimator, LengthBasedEstimator(4).from_length)
        if isinstance(estimator, LengthBasedEstimator):
            return cls(estimator, estimator.from_length)
        additive = bool(getattr(estimator, "additive_at_word_starts", False))
        return cls(_counting(estimator), None, additive)

    def text_size(self, text: str) -> int:
        """Size of a summary: 0 for ``""``, else the estimator's count."""
        return self.estimator(text) if text else 0

    def entry_size(self, fragment: str) -> int:
        """What one turn adds to the running sums: its fragment's length, or for an additive
        estimator the count of the fragment from its first key to the next turn's."""
        if self.additive:
            return self._count(fragment[2:] + _NEXT_TURN)
        return len(fragment)

    @property
    def size_of(self) -> Callable[[str], int]:
        """:meth:`entry_size`, as ``len`` itself where that is what it computes."""
        return self.entry_size if self.additive else len

    def _count(self, text: str) -> int:
        counts = self._counts
        found = counts.get(text)
        if found is None:
            if len(counts) >= _CACHE_SIZE:
                counts.clear()
            found = counts[text] = self.estimator(text)
        return found

    def view_tokens(self, summary_json: str | None, pending: Part | None, recent: Part) -> int:
        """Tokens of a ``conversation_memory`` view.

        ``pending`` is ``None`` or has count 0 when no pending turn is visible;
        ``summary_json`` is ``None`` when absent.
        """
        if self.from_length is not None:
            count, size = (pending[0], pending[1]) if pending is not None else (0, 0)
            return self.length_tokens(summary_json, count, size, recent[0], recent[1])
        if self.additive:
            return self._additive_tokens(summary_json, pending, recent)
        parts = [_OPEN]
        if pending is not None and pending[0]:
            parts += [_PENDING_OPEN, ",".join(pending[2]()), "],"]
        parts += [_RECENT_OPEN, ",".join(recent[2]()), "]"]
        if summary_json is not None:
            parts += [_SUMMARY_KEY, summary_json]
        parts.append(_CLOSE)
        return self.estimator("".join(parts))

    def length_tokens(
        self,
        summary_json: str | None,
        pending_count: int,
        pending_size: int,
        recent_count: int,
        recent_size: int,
    ) -> int:
        """:meth:`view_tokens` for a length-based estimator, from counts and sizes alone
        (the budget's hot path: no list, no closure)."""
        assert self.from_length is not None
        length = _FIXED_LENGTH + _list_length(recent_count, recent_size)
        if pending_count:
            length += _PENDING_LENGTH + _list_length(pending_count, pending_size)
        if summary_json is not None:
            length += len(_SUMMARY_KEY) + len(summary_json)
        return self.from_length(length)

    def _additive_tokens(self, summary_json: str | None, pending: Part | None, recent: Part) -> int:
        count = self._count
        tokens = count(_HEAD)
        if pending is not None and pending[0]:
            last = pending[3]()
            tokens += count(_PENDING_HEAD) + pending[1] - last.size
            tokens += count(last.fragment[2:] + _NEXT_KEY)
        after = _NEXT_KEY if summary_json is not None else _END
        if recent[0]:
            last = recent[3]()
            tokens += count(_RECENT_HEAD) + recent[1] - last.size
            tokens += count(last.fragment[2:] + after)
        else:
            tokens += count('recent_turns":[' + after)
        if summary_json is not None:
            tokens += count(_SUMMARY_HEAD + summary_json + _CLOSE)
        return tokens
