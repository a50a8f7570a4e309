"""A memory state split into its turns, one JSON text each, and the rest.

``memory.to_dict()`` holds up to three lists of turns (``turns``, ``pending``,
``backlog``), each turn an object with an integer ``seq`` unique in the state. A store
that keeps each turn apart writes, on each save, only the turns that differ from what it
last wrote or read, and the small rest of the state: a persist after one more turn costs
one turn, not the conversation.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reference_impl.store import CorruptStateError, InvalidStateError

from .codec import check_text, encode_state

__all__ = ["TURN_LISTS", "Rows", "Split", "join_rows", "split_state"]

#: The lists of turns a state is split on, in the order ``to_dict`` writes them.
TURN_LISTS = ("turns", "pending", "backlog")

#: A turn as a store keeps it: a private copy to compare the next save's turn against (its
#: containers the store's own; see ``_sharing``), its JSON text, and the dict it was saved
#: from (``None`` for a turn loaded).
Turn = tuple[dict[str, Any], str, object]


_NONE: Mapping[int, Turn] = {}
#: The seqs a row can hold: SQLite's INTEGER is a signed 64-bit integer.
_SEQ_MIN, _SEQ_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, slots=True)
class Rows:
    """The turn rows of one key as a store last wrote or read them, with the stamp
    written beside them (a later write by anyone changes the stamp)."""

    stamp: int
    turns: Mapping[int, Turn]


@dataclass(frozen=True, slots=True)
class Split:
    """A state ready to write: the rest of the state as JSON (``head``), the ``layout``
    (JSON: each list's seqs in order) and every turn by seq. A turn equal to the one in
    ``base`` shares its text object with it; ``changed`` are the seqs of the others (new
    or changed since ``base``), the only turns a writer that holds ``base`` must write."""

    revision: int
    head: str
    layout: str
    turns: dict[int, Turn]
    base: Rows | None
    changed: list[int]


def split_state(key: str, state: object, base: Rows | None) -> Split | None:
    """Split ``state`` into rows, or ``None`` when it is not shaped like a memory state
    (then it is kept whole). Raises ``InvalidStateError`` for what no store can keep,
    as :func:`~stm_stores.codec.encode_state` does for a whole state.

    A turn equal to the one ``base`` holds under its seq is not encoded again. Equal means
    ``==`` and the same JSON: values that compare equal across types (``1``, ``1.0``,
    ``True``; ``0.0`` and ``-0.0``; a ``Decimal``) differ. The dict a turn was last saved
    from, given again, is compared with ``==`` alone: a turn changed in place from one of
    those values to another equal one is not written (a memory never changes a turn it
    gave a store; give a new dict for a changed turn).
    """
    if not isinstance(state, Mapping):
        return None
    lists = {name: state[name] for name in TURN_LISTS if name in state}
    if not lists or any(type(items) is not list for items in lists.values()):
        return None
    known: Callable[[int], Turn | None] = (base.turns if base is not None else _NONE).get
    layout: dict[str, list[int]] = {}
    turns: dict[int, Turn] = {}
    changed: list[int] = []
    # One pass, as cheap per turn as it can be: a save of a long conversation that gained
    # one turn compares the others with what the store holds and encodes that one.
    for name, items in lists.items():
        seqs = layout[name] = []
        for item in items:
            if type(item) is not dict:
                return None
            seq = item.get("seq")
            if type(seq) is not int or not _SEQ_MIN <= seq <= _SEQ_MAX or seq in turns:
                # Not a memory state, or a seq no row can hold: kept whole.
                return None
            seqs.append(seq)
            cached = known(seq)
            if cached is not None:
                try:
                    # The dict saved last time, given again (a memory's next persist): its
                    # leaves are the copy's, and == compares them by identity. Any other
                    # dict: equal values of another type would be written as other JSON.
                    if cached[0] == item and (cached[2] is item or _same_json(cached[0], item)):
                        turns[seq] = cached
                        continue
                except Exception:
                    # Too deep to compare, or a value whose == raises (a signalling-NaN
                    # Decimal): encoded again, and refused as a first save of it would be.
                    pass
            turns[seq] = _encode(key, item)
            changed.append(seq)
    revision, head = encode_state(key, {k: v for k, v in state.items() if k not in lists})
    layout_json = json.dumps(layout, separators=(",", ":"))
    return Split(revision, head, layout_json, turns, base, changed)


def join_rows(
    key: str, head: dict[str, Any], layout: str, rows: Sequence[tuple[Any, Any]]
) -> tuple[dict[str, Any], dict[int, Turn]]:
    """The state stored as ``head``, ``layout`` and turn ``rows`` (``(seq, text)``), and
    the turns to remember. Raises ``CorruptStateError`` if they do not fit together."""
    try:
        lists = json.loads(layout)
    except (ValueError, TypeError, RecursionError) as exc:
        raise CorruptStateError(f"stored turn layout is not valid JSON: {exc}", key=key) from exc
    if (
        not isinstance(lists, dict)
        or not set(lists) <= set(TURN_LISTS)
        or not all(
            type(seqs) is list and all(type(s) is int for s in seqs) for seqs in lists.values()
        )
    ):
        raise CorruptStateError("stored turn layout is not lists of seqs", key=key)
    turns: dict[int, Turn] = {}
    for seq, text in rows:
        try:
            turn = json.loads(text) if isinstance(text, str) else None
        except (ValueError, RecursionError):
            turn = None
        if type(seq) is not int or type(turn) is not dict or turn.get("seq") != seq:
            raise CorruptStateError(f"stored turn {seq!r} does not match its row", key=key)
        # A turn's keys are the few of to_dict(): interned, they are the very objects a
        # memory's turn dicts use, which makes comparing them cheap (see _sharing).
        turns[seq] = ({sys.intern(k): v for k, v in turn.items()}, text, None)
    state = head
    for name, seqs in lists.items():
        missing = [seq for seq in seqs if seq not in turns]
        if missing:
            raise CorruptStateError(f"stored turns {missing[:5]} of {name!r} are missing", key=key)
        # Each caller gets containers of its own; keys, strings and numbers are shared
        # with the copy the store keeps. A memory loaded from them gives the same strings
        # back on its next save, which then compares each turn in a few reads.
        state[name] = [_own_containers(turns[seq]) for seq in seqs]
    return state, turns


def _own_containers(turn: Turn) -> dict[str, Any]:
    try:
        # Decoded JSON is its own JSON form: this copies its containers, shares the rest.
        copied: dict[str, Any] = _sharing(turn[0], turn[0])
    except RecursionError:  # nested deeper than Python frames allow: decode it again
        return json.loads(turn[1])  # type: ignore[no-any-return]
    return copied


def _same_json(stored: Any, given: Any) -> bool:
    """Whether ``given``, equal (``==``) to ``stored``, also has its types throughout."""
    if stored is given:
        return True
    kind = type(stored)
    if kind is not type(given):
        return False
    if kind is dict:
        return all(_same_json(value, given[key]) for key, value in stored.items())
    if kind is list:
        return all(map(_same_json, stored, given))
    if kind is float:  # 0.0 == -0.0
        return math.copysign(1.0, stored) == math.copysign(1.0, given)
    return True


def _encode(key: str, turn: dict[str, Any]) -> Turn:
    try:
        text = json.dumps(turn, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidStateError(f"state is not JSON-serialisable: {exc}", key=key) from exc
    check_text(key, text)
    decoded = json.loads(text)
    if decoded != turn:
        raise InvalidStateError(
            "state does not survive a JSON round trip unchanged (tuples or non-str dict keys?)",
            key=key,
        )
    try:
        return _sharing(turn, decoded), text, turn
    except RecursionError:  # nested deeper than Python frames allow: the plain copy
        return decoded, text, turn


#: Immutable values a store's private copy may share with the caller's turn (exact types:
#: a subclass could compare equal to anything).
_SHARED = frozenset({str, int, float, bool, type(None)})


def _sharing(given: Any, decoded: Any) -> Any:
    """``decoded`` (the JSON form of ``given``, equal to it), with the immutable leaves of
    ``given`` in place of its own, keys included. The next save compares its turn with
    this copy: a turn given again shares its keys and strings with it, and ``==`` on the
    same object reads neither. A save of a long conversation compares every turn it
    holds, and with many conversations held those turns are out of the CPU's caches:
    reading a few words per turn instead of every key and character is most of its
    cost."""
    kind = type(given)
    if kind in _SHARED:
        return given
    if kind is dict:  # same length and order: json keeps a dict's order both ways
        return {
            gk if type(gk) is str else dk: _sharing(gv, dv)
            for (gk, gv), (dk, dv) in zip(given.items(), decoded.items(), strict=True)
        }
    if kind is list:
        return [_sharing(g, d) for g, d in zip(given, decoded, strict=True)]
    return decoded
