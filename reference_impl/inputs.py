"""Checks of what enters a memory from outside: turns, loaded states, summaries.

Everything a memory stores must round-trip through every store: JSON, UTF-8, SQLite.
So text must be encodable (no lone surrogates), numbers finite and in range, and nesting
shallow enough for JSON readers to load again. A refusal raises ``TypeError`` (wrong
type) or ``ValueError`` (bad value) naming where the problem is, before anything changes.
"""

from __future__ import annotations

import math
from typing import Any, TypeAlias, TypeGuard

from .types import ConversationTurn, TrajectoryDigest

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_REVISION",
    "MAX_TURN_ID",
    "STORED_TURN_FIELDS",
    "check_json",
    "check_text",
    "check_turn",
    "check_turn_id",
    "read_plain_turn",
    "text_problem",
]

#: Deepest nesting of artifacts accepted. JSON readers bound it (pydantic's ~255, the
#: recursion limit of ``json``); an agent's artifacts never come near.
MAX_DEPTH = 64
#: Largest revision: stores keep it in a signed 64-bit integer (SQLite's INTEGER).
MAX_REVISION = 2**63 - 1
#: Longest turn id: an id names a turn, it does not carry data.
MAX_TURN_ID = 256
#: Most decimal digits of an ``int`` in artifacts: Python's default limit on converting an
#: int to text, so ``json.dumps`` (every store) can write it.
MAX_INT_DIGITS = 4300
_INT_BOUND = 10**MAX_INT_DIGITS
#: The fields of a turn in a stored state (``schema.TurnV2``).
STORED_TURN_FIELDS = frozenset(
    (
        "seq",
        "user_message",
        "assistant_response",
        "trajectory_digest",
        "artifacts_shown",
        "artifacts_hidden_refs",
        "ts",
        "turn_id",
    )
)
_ABSENT: Any = object()
#: Deepest nesting the recursive check (``_plain``) looks into; the walk takes deeper data.
_PLAIN_DEPTH = 100


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as UTF-8 (a lone surrogate), or ``None``."""
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"lone surrogate {value[exc.start]!r} at index {exc.start}: not valid Unicode text"
    return None


def check_text(value: str, where: str) -> None:
    """Raise ``ValueError`` unless ``value`` can be stored as UTF-8."""
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(f"{where}: {problem}")


def check_json(value: Any, where: str, *, max_depth: int = MAX_DEPTH) -> None:
    """Raise unless ``value`` is plain JSON data that every store gives back as it was.

    Plain: ``dict`` with ``str`` keys, ``list``, ``str``, ``int`` (at most
    :data:`MAX_INT_DIGITS` digits), finite ``float``, ``bool``, ``None``; at most
    ``max_depth`` deep; text valid Unicode. A tuple would
    come back as a list and an ``int`` key as a string, so they are refused too.

    Raises:
        TypeError: a value of another type. ValueError: a bad value, or too deep.
    """
    # Recursive, so bounded: anything deeper is left to the walk, which is iterative.
    if _plain(value, min(max_depth, _PLAIN_DEPTH)):
        return
    try:
        _walk(value, where, max_depth)
    except (TypeError, ValueError) as exc:
        # A path into deep data is long: keep its start and its end.
        text = str(exc)
        if len(text) > 300:
            text = f"{text[:120]} ... {text[-150:]}"
        raise type(exc)(text) from None


def _plain(value: Any, depth_left: int) -> bool:
    """Whether every value in ``value`` has exactly a plain type (``dict`` with text keys,
    ``list``, text, finite ``float``, ``int`` in range, ``bool``, ``None``) with containers fewer
    than ``depth_left`` levels deep: what the walk below passes, checked without its
    bookkeeping. Loaded states and turns are nearly always such data; the walk decides
    anything else (and names the problem)."""
    kind = type(value)
    if kind is str:
        return value.isascii() or text_problem(value) is None
    if kind is int:
        return bool(-_INT_BOUND < value < _INT_BOUND)
    if kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if depth_left <= 0:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or text_problem(key) is None):
                return False
            if not _plain(item, depth_left - 1):
                return False
        return True
    if kind is list:
        return all(_plain(item, depth_left - 1) for item in value)
    return False


#: Where a value sits below the checked one: its container's place and its own key or
#: index (``None`` for the checked value itself). Written out only for an error message.
_Place: TypeAlias = "tuple[_Place, str | int] | None"


def _walk(value: Any, where: str, max_depth: int) -> None:
    # Each stack entry keeps its place as a chain of keys, written out as a path only for
    # an error: a loaded state of 10,000 turns has some 100,000 values to check.
    stack: list[tuple[Any, _Place, int]] = [(value, None, 0)]
    while stack:  # iterative: deep input must not exhaust the recursion limit first
        item, place, depth = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                raise ValueError(f"{_path(where, place)}: {problem}")
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not -_INT_BOUND < item < _INT_BOUND:
                raise ValueError(
                    f"{_path(where, place)}: an int of more than {MAX_INT_DIGITS} digits,"
                    " which no store can write as JSON"
                )
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(f"{_path(where, place)}: {item!r} is not a finite number")
        elif isinstance(item, dict | list):
            if depth >= max_depth:
                raise ValueError(f"{_path(where, place)}: nested deeper than {max_depth} levels")
            if isinstance(item, list):
                stack.extend((v, (place, i), depth + 1) for i, v in enumerate(item))
                continue
            for k, v in item.items():
                if not isinstance(k, str):
                    raise TypeError(f"{_path(where, place)}: key {k!r} is not a str")
                problem = text_problem(k)
                if problem is not None:
                    raise ValueError(f"{_path(where, place)} key {k!r}: {problem}")
                stack.append((v, (place, k), depth + 1))
        else:
            raise TypeError(f"{_path(where, place)}: {type(item).__name__} is not plain JSON data")


def _path(where: str, place: _Place) -> str:
    """``where`` followed by ``[key]`` for each step of ``place`` (``['a'][0]``)."""
    keys: list[str | int] = []
    while place is not None:
        place, key = place
        keys.append(key)
    return where + "".join(f"[{key!r}]" for key in reversed(keys))


def read_plain_turn(raw: Any) -> tuple[int, ConversationTurn] | None:
    """The sequence number and turn that ``raw``, a turn of a stored state, holds, read
    without the schema's model when every value in it has exactly a plain type (``str``,
    ``int``, finite ``float``, ``bool``, ``None``, ``list``, ``dict``) where the model
    wants one. ``None`` for anything else, and for anything the model (``schema.TurnV2``)
    or :func:`check_json` would refuse: the model then decides, and names the problem.

    The turn owns its containers (a deep copy, as the model makes). Read this way, a
    state of 10,000 turns loads in about a third of the time, making a fraction of the
    objects; tests hold the reading to the model, turn for turn.
    """
    if type(raw) is not dict or not raw.keys() <= STORED_TURN_FIELDS:
        return None
    get = raw.get
    seq, user, assistant = get("seq"), get("user_message"), get("assistant_response")
    ts, turn_id = get("ts", 0.0), get("turn_id")
    if (
        type(seq) is not int
        or seq < 1
        or not _is_text(user)
        or not _is_text(assistant)
        or type(ts) is not float
        or ts - ts != 0.0  # NaN for NaN and ±inf
        or not (turn_id is None or (_is_text(turn_id) and 0 < len(turn_id) <= MAX_TURN_ID))
    ):
        return None
    digest = get("trajectory_digest")
    if digest is not None and (digest := _read_digest(digest)) is None:
        return None
    shown = get("artifacts_shown", _ABSENT)
    if shown is _ABSENT or (type(shown) is dict and not shown):  # the common turn
        shown = {}
    elif type(shown) is dict and _plain(shown, MAX_DEPTH):  # what check_json passes
        shown = _copy(shown)
    else:
        return None
    hidden = get("artifacts_hidden_refs", _ABSENT)
    if hidden is _ABSENT:
        hidden = []
    elif (hidden := _texts(hidden)) is None:
        return None
    return seq, ConversationTurn(
        user_message=user,
        assistant_response=assistant,
        trajectory_digest=digest,
        artifacts_shown=shown,
        artifacts_hidden_refs=hidden,
        ts=ts,
        turn_id=turn_id,
    )


_DIGEST_FIELDS = frozenset(
    ("tools_invoked", "observations_summary", "reasoning_summary", "artifacts_refs")
)


def _read_digest(raw: Any) -> TrajectoryDigest | None:
    """:func:`read_plain_turn` for a stored digest (``schema.DigestV2``)."""
    if type(raw) is not dict or not raw.keys() <= _DIGEST_FIELDS:
        return None
    tools, refs = _texts(raw.get("tools_invoked")), _texts(raw.get("artifacts_refs", []))
    observations, reasoning = raw.get("observations_summary"), raw.get("reasoning_summary")
    if (
        tools is None
        or refs is None
        or not _is_text(observations)
        or not (reasoning is None or _is_text(reasoning))
    ):
        return None
    return TrajectoryDigest(
        tools_invoked=tools,
        observations_summary=observations,
        reasoning_summary=reasoning,
        artifacts_refs=refs,
    )


def _is_text(value: Any) -> TypeGuard[str]:
    # ``isascii`` first: it reads a flag, where a call costs more than the check.
    return type(value) is str and (value.isascii() or text_problem(value) is None)


def _texts(value: Any) -> list[str] | None:
    """A copy of ``value`` if it is a list of text, else ``None``."""
    if type(value) is not list or not all(map(_is_text, value)):
        return None
    return list(value)


def _copy(value: Any) -> Any:
    """A deep copy of plain data (every container a ``dict`` or a ``list``)."""
    if type(value) is dict:
        return {key: _copy(item) for key, item in value.items()}
    if type(value) is list:
        return [_copy(item) for item in value]
    return value


def check_turn(turn: Any) -> None:
    """Refuse a malformed turn before anything changes (bad input leaves state untouched).

    Raises:
        TypeError: for every refusal, a bad value too (text that is not valid Unicode,
            artifacts that are not finite or too deep): ``add_turn`` has one error for a
            turn it cannot take, and the message names the field.
    """
    # The common turn -- two ASCII strings, a float time, nothing else -- in a few C-level
    # tests (``isascii`` reads a flag of the string object; ``ts - ts`` is NaN for ±inf and
    # NaN). Anything else takes the full walk below.
    if (
        type(turn) is ConversationTurn
        and type(user := turn.user_message) is str
        and user.isascii()
        and type(assistant := turn.assistant_response) is str
        and assistant.isascii()
        and turn.trajectory_digest is None
        and type(ts := turn.ts) is float
        and ts - ts == 0.0
        and type(turn.artifacts_shown) is dict
        and not turn.artifacts_shown
        and type(turn.artifacts_hidden_refs) is list
        and not turn.artifacts_hidden_refs
        and turn.turn_id is None
    ):
        return
    try:
        _check_turn(turn)
    except ValueError as exc:
        raise TypeError(str(exc)) from None


def _check_turn(turn: Any) -> None:
    if not isinstance(turn, ConversationTurn):
        raise TypeError(f"add_turn expects a ConversationTurn, got {type(turn).__name__}")
    for name in ("user_message", "assistant_response"):
        text = getattr(turn, name)
        if not isinstance(text, str):
            raise TypeError(f"ConversationTurn.{name} must be a str")
        check_text(text, f"ConversationTurn.{name}")
    digest = turn.trajectory_digest
    if digest is not None:
        if not isinstance(digest, TrajectoryDigest):
            raise TypeError("ConversationTurn.trajectory_digest must be a TrajectoryDigest")
        for name in ("tools_invoked", "artifacts_refs"):
            _check_texts(getattr(digest, name), f"TrajectoryDigest.{name}")
        if not isinstance(digest.observations_summary, str) or not isinstance(
            digest.reasoning_summary, str | None
        ):
            raise TypeError("TrajectoryDigest summaries must be strings")
        check_text(digest.observations_summary, "TrajectoryDigest.observations_summary")
        if digest.reasoning_summary is not None:
            check_text(digest.reasoning_summary, "TrajectoryDigest.reasoning_summary")
    ts = turn.ts
    try:
        finite = isinstance(ts, int | float) and not isinstance(ts, bool) and math.isfinite(ts)
    except OverflowError:  # an int beyond any float
        finite = False
    if not finite:
        raise TypeError("ConversationTurn.ts must be a finite number")
    if isinstance(ts, int) and float(ts) != ts:  # stored as a float, it would come back changed
        raise TypeError(f"ConversationTurn.ts: {ts} is an int no float holds exactly")
    if not isinstance(turn.artifacts_shown, dict):
        raise TypeError("ConversationTurn.artifacts_shown must be a dict")
    _check_texts(turn.artifacts_hidden_refs, "ConversationTurn.artifacts_hidden_refs")
    check_turn_id(turn.turn_id)
    if turn.artifacts_shown:
        check_json(turn.artifacts_shown, "ConversationTurn.artifacts_shown")


def check_turn_id(turn_id: Any, name: str = "ConversationTurn.turn_id") -> None:
    """Raise ``TypeError`` unless ``turn_id`` is ``None`` or a usable id: a non-empty
    string of valid Unicode, at most :data:`MAX_TURN_ID` characters. ``name`` is what
    the message calls it."""
    if turn_id is None:
        return
    if not isinstance(turn_id, str) or not turn_id or len(turn_id) > MAX_TURN_ID:
        raise TypeError(f"{name} must be None or a str of 1 to {MAX_TURN_ID} characters")
    problem = text_problem(turn_id)
    if problem is not None:
        raise TypeError(f"{name}: {problem}")


def _check_texts(value: Any, where: str) -> None:
    # A bare string is iterable too; stored, it would come back as a list of characters.
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{where} must be a list of strings")
    for i, text in enumerate(value):
        check_text(text, f"{where}[{i}]")
