"""``RedisStateStore``: durable snapshots of memory state in Redis, with conditional saves."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from typing import Any

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from stm_stores.codec import check_expected_revision, check_key, decode_state, encode_state

from reference_impl.store import CorruptStateError, StaleStateError, StateStoreError

from .keys import check_namespace
from .options import check_ms

__all__ = ["RedisStateStore"]

# KEYS[1] the record (a hash of rev and state). ARGV: 1 expected rev ('' = no record may
# exist), 2 new rev, 3 state, 4 ttl ms (0: none). Replies {'ok'} or {'stale', actual|''}.
# A record that already holds the new revision with this very state is this save, sent
# again after its reply was lost (redis-py retries a command whose connection failed):
# it landed, so it is done, not stale.
_SAVE_IF = """
local actual = redis.call('HGET', KEYS[1], 'rev')
if (actual or '') ~= ARGV[1] then
  if actual == ARGV[2] and redis.call('HGET', KEYS[1], 'state') == ARGV[3] then
    return {'ok'}
  end
  return {'stale', actual or ''}
end
redis.call('HSET', KEYS[1], 'rev', ARGV[2], 'state', ARGV[3])
if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
return {'ok'}
"""

_UNAVAILABLE = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError, TimeoutError)


def _escape_glob(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RedisStateStore:
    """Keeps each state as a hash (``rev``, ``state`` JSON) under ``<namespace>:<key>``.

    Implements :class:`reference_impl.store.ConditionalStateStore`: a conditional save
    reads the record (one that cannot be read is refused, not overwritten), then compares
    the revision and writes inside one script, atomic across processes. Keys are used as
    given after the namespace, so distinct keys of one store never share a record; stores
    whose namespaces nest (``app`` and ``app:v2``) do. ``ttl_s`` (default none) expires
    records not saved for that long. A record that cannot be read (its ``rev`` not an
    integer, its state not UTF-8 JSON) is a ``CorruptStateError``.
    """

    def __init__(
        self,
        client: Redis,
        *,
        namespace: str = "stm-state",
        ttl_s: float | None = None,
        owns_client: bool = False,
    ) -> None:
        if ttl_s is not None:
            check_ms("ttl_s", ttl_s)
        self._client = client
        self._namespace = check_namespace(namespace)
        self._ttl_ms = "0" if ttl_s is None else str(round(ttl_s * 1000))
        self._owns_client = owns_client
        self._save_if = client.register_script(_SAVE_IF)

    def _key(self, key: str) -> str:
        return f"{self._namespace}:{check_key(key)}"

    async def save_memory_state(self, key: str, state: Mapping[str, Any]) -> None:
        """Store ``state`` under ``key``, replacing any existing record."""
        redis_key = self._key(key)
        revision, text = encode_state(key, state)
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hset(redis_key, mapping={"rev": str(revision), "state": text})
                if self._ttl_ms != "0":
                    pipe.pexpire(redis_key, int(self._ttl_ms))
                await pipe.execute()
        except redis_errors.RedisError as exc:
            raise self._error(key, exc) from exc

    async def save_memory_state_if(
        self, key: str, state: Mapping[str, Any], *, expected_revision: int | None
    ) -> None:
        """Store ``state`` only if the stored revision equals ``expected_revision``
        (``None``: no record may exist); else :class:`StaleStateError`, record unchanged.

        A record that cannot be read is a :class:`CorruptStateError` here too, and is left
        as it is: it is read first, then written if its revision is still the one read.
        """
        redis_key = self._key(key)
        check_expected_revision(expected_revision)
        revision, text = encode_state(key, state)
        expected = "" if expected_revision is None else str(expected_revision)
        rev, stored = await self._read(key, redis_key)
        if stored is not None:
            _decode(key, rev, stored)
        elif rev is not None:
            _revision(key, rev)
        try:
            reply = await self._save_if(
                keys=[redis_key], args=[expected, str(revision), text, self._ttl_ms]
            )
        except redis_errors.RedisError as exc:
            raise self._error(key, exc) from exc
        if _text(reply[0]) != "ok":
            actual = _revision(key, reply[1]) if reply[1] else None
            raise StaleStateError(key, expected=expected_revision, actual=actual)

    async def load_memory_state(self, key: str) -> dict[str, Any] | None:
        """Return the state under ``key``, or ``None``."""
        rev, text = await self._read(key, self._key(key))
        if text is None:
            return None
        return _decode(key, rev, text)

    async def delete_memory_state(self, key: str) -> bool:
        """Remove the record under ``key``; return whether there was one."""
        redis_key = self._key(key)
        try:
            return bool(await self._client.delete(redis_key))
        except redis_errors.RedisError as exc:
            raise self._error(key, exc) from exc

    async def keys(self) -> list[str]:
        """Every stored key, sorted by code point."""
        prefix = f"{self._namespace}:"
        found: list[str] = []
        try:
            async for raw in self._client.scan_iter(match=_escape_glob(prefix) + "*", count=500):
                found.append(_text(raw)[len(prefix) :])
        except redis_errors.RedisError as exc:
            raise StateStoreError(f"listing keys failed: {exc}") from exc
        except UnicodeDecodeError as exc:  # no key of this store: they are all text
            raise StateStoreError(f"a key under {prefix!r} is not UTF-8: {exc}") from exc
        return sorted(found)

    async def aclose(self) -> None:
        """Close the client if this store owns it."""
        if self._owns_client:
            await self._client.aclose()

    async def _read(self, key: str, redis_key: str) -> tuple[Any, Any]:
        """The record's ``rev`` and ``state`` fields as the client gives them."""
        try:
            rev, text = await self._client.hmget(redis_key, ["rev", "state"])
        except redis_errors.RedisError as exc:
            raise self._error(key, exc) from exc
        except UnicodeDecodeError as exc:  # a client with decode_responses=True
            raise CorruptStateError(f"stored record is not UTF-8: {exc}", key=key) from exc
        return rev, text

    def _error(self, key: str, exc: Exception) -> StateStoreError:
        if isinstance(exc, _UNAVAILABLE):
            return StateStoreError(f"Redis unavailable: {type(exc).__name__}: {exc}", key=key)
        return StateStoreError(f"Redis refused the operation: {exc}", key=key)


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _decode(key: str, rev: Any, text: Any) -> dict[str, Any]:
    """A stored record's state; ``CorruptStateError`` unless it can be read."""
    try:
        decoded = _text(text)
    except UnicodeDecodeError as exc:
        raise CorruptStateError(f"stored state is not UTF-8: {exc}", key=key) from exc
    return decode_state(key, decoded, _revision(key, rev))


def _revision(key: str, raw: Any) -> int:
    """A record's stored ``rev`` field; ``CorruptStateError`` unless it is an integer
    written as this store writes one (``int()`` also reads ``"010"``, ``" 10"`` and
    ``"1_0"``, which the save script, comparing text, would never match)."""
    if raw is not None:
        with contextlib.suppress(ValueError):  # UnicodeDecodeError included
            text = _text(raw)
            if _CANONICAL_REV.fullmatch(text):
                return int(text)
    raise CorruptStateError(f"stored revision {raw!r} is not an integer", key=key)


_CANONICAL_REV = re.compile(r"0|[1-9][0-9]*")
