"""JSON encoding and checking of keys and state records, shared by all stores.

Every store keeps state as JSON text, so what a caller loads is always a fresh
copy and all stores accept exactly the same states.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reference_impl.inputs import MAX_REVISION
from reference_impl.store import (
    CorruptStateError,
    InvalidStateError,
    StateStoreError,
    revision_of,
)

__all__ = [
    "MAX_KEY_BYTES",
    "check_expected_revision",
    "check_key",
    "check_text",
    "decode_state",
    "encode_state",
]


#: The longest key every store can hold, in UTF-8 bytes: SQLite's longest string (its
#: default ``SQLITE_MAX_LENGTH``). Beyond 2**31 - 1 bytes its driver cannot even send one.
MAX_KEY_BYTES = 1_000_000_000


def check_key(key: object) -> str:
    """Return ``key`` if every store can hold it, else raise.

    Any ``str`` is accepted except one with lone surrogates, which has no UTF-8
    form and so could not be stored by a database, and one longer than
    :data:`MAX_KEY_BYTES` in UTF-8 (:class:`StateStoreError`, as for those).
    """
    if not isinstance(key, str):
        raise TypeError(f"state key must be str, not {type(key).__name__}")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise StateStoreError("state key is not valid unicode text", key=key) from exc
    if size > MAX_KEY_BYTES:
        raise StateStoreError(
            f"state key is {size} bytes in UTF-8; a store holds keys of at most {MAX_KEY_BYTES}",
            key=key,
        )
    return key


def check_expected_revision(expected_revision: object) -> int | None:
    """Return ``expected_revision`` if it is ``None`` or an int from 0 to 2**63 - 1 (what
    every store can compare: SQLite keeps a revision in a signed 64-bit integer), else
    raise."""
    if expected_revision is None:
        return None
    if type(expected_revision) is not int:
        raise TypeError(
            f"expected_revision must be None or int, not {type(expected_revision).__name__}"
        )
    if not 0 <= expected_revision <= MAX_REVISION:
        raise ValueError(f"expected_revision must be from 0 to 2**63 - 1, not {expected_revision}")
    return expected_revision


def encode_state(key: str, state: Mapping[str, Any]) -> tuple[int, str]:
    """Return ``(revision, json_text)`` for ``state``.

    Raises :class:`InvalidStateError` unless ``state`` is a mapping that survives a
    JSON round trip unchanged (so tuples, non-str dict keys and NaN are refused
    rather than silently altered), holds only valid Unicode text, and its revision is
    an int from 0 to 2**63 - 1.
    """
    if not isinstance(state, Mapping):
        raise InvalidStateError(f"state must be a mapping, not {type(state).__name__}", key=key)
    plain = dict(state)
    revision = revision_of(plain)
    if type(revision) is not int or not 0 <= revision <= MAX_REVISION:
        raise InvalidStateError(
            f"state revision must be an int from 0 to 2**63 - 1, not {revision!r}", key=key
        )
    try:
        text = json.dumps(plain, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidStateError(f"state is not JSON-serialisable: {exc}", key=key) from exc
    check_text(key, text)
    if json.loads(text) != plain:
        raise InvalidStateError(
            "state does not survive a JSON round trip unchanged (tuples or non-str dict keys?)",
            key=key,
        )
    return revision, text


def check_text(key: str, text: str) -> None:
    """Raise :class:`InvalidStateError` if ``text`` holds a lone surrogate: it has no UTF-8
    form, so a database could not store it (and JSON could only carry it escaped)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidStateError(
            f"state holds text that is not valid Unicode (a lone surrogate at {exc.start})",
            key=key,
        ) from None


def decode_state(key: str, text: object, revision: object = None) -> dict[str, Any]:
    """Decode a stored record into a state dict.

    ``revision``, when given, is the revision stored beside the text and must agree
    with the one inside it. Raises :class:`CorruptStateError` for anything that is
    not a JSON object with a consistent revision.
    """
    if not isinstance(text, str):
        raise CorruptStateError(f"stored state is {type(text).__name__}, not JSON text", key=key)
    try:
        state = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CorruptStateError(f"stored state is not valid JSON: {exc}", key=key) from exc
    if not isinstance(state, dict):
        raise CorruptStateError(
            f"stored state is a JSON {type(state).__name__}, not an object", key=key
        )
    inner = revision_of(state)
    if type(inner) is not int or inner < 0:
        raise CorruptStateError(f"stored state has invalid revision {inner!r}", key=key)
    if revision is not None and (type(revision) is not int or revision != inner):
        raise CorruptStateError(
            f"stored revision {revision!r} disagrees with the state's revision {inner}",
            key=key,
        )
    return state
