"""Short-term memory in Redis: a shared ``ShortTermMemory`` and a conditional state store.

``RedisShortTermMemory`` keeps a session's whole state in Redis, so instances in any number
of processes share one memory; ``RedisStateStore`` keeps snapshots of the reference memory.
See ``docs/redis.md``.
"""

from .errors import RedisContentionError, RedisMemoryError, RedisUnavailableError
from .keys import DEFAULT_NAMESPACE, SessionKeys, encode_memory_key
from .memory import DEFAULT_LEASE_TTL_S, DEFAULT_TTL_S, RedisShortTermMemory
from .store import RedisStateStore

__all__ = [
    "DEFAULT_LEASE_TTL_S",
    "DEFAULT_NAMESPACE",
    "DEFAULT_TTL_S",
    "RedisContentionError",
    "RedisMemoryError",
    "RedisShortTermMemory",
    "RedisStateStore",
    "RedisUnavailableError",
    "SessionKeys",
    "encode_memory_key",
]
