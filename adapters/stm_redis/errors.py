"""Typed errors of the Redis backend; each names the Redis key it was about."""

from __future__ import annotations

__all__ = ["RedisContentionError", "RedisMemoryError", "RedisUnavailableError"]


class RedisMemoryError(RuntimeError):
    """A Redis operation of a memory failed; the memory's state is as before the call.

    ``key`` is the Redis key of the session's state. For ``add_turn``, ``turn_id`` is the
    id the turn was sent with and ``recorded`` whether it is known to be stored: ``None``
    means unknown (the reply was lost), in which case calling ``add_turn`` again with
    ``turn_id=error.turn_id`` records it at most once.
    """

    def __init__(
        self,
        message: str,
        *,
        key: str,
        turn_id: str | None = None,
        recorded: bool | None = None,
    ) -> None:
        self.key = key
        self.turn_id = turn_id
        self.recorded = recorded
        self.detail = message
        super().__init__(f"{message} (key={key!r})")


class RedisUnavailableError(RedisMemoryError):
    """Redis could not be reached or did not answer in time (connection error, timeout,
    server loading its data set)."""


class RedisContentionError(RedisMemoryError):
    """A compare-and-set kept losing to other writers of the same session."""
