"""Checks of the numeric options of the Redis memory and store, made when they are built.

Each option ends up in a script's arguments; one Redis refuses (``inf``, ``1.5`` where a
count is due) would fail a script midway, after its first writes.
"""

from __future__ import annotations

__all__ = ["MAX_COUNT", "check_count", "check_ms", "check_seconds"]

#: The longest time an option may give, in seconds: Redis keeps milliseconds in 64 bits.
_MAX_SECONDS = 2.0**53 / 1000


def check_seconds(name: str, value: object) -> float:
    """``value`` if it is a finite number of seconds above 0 (``TypeError``/``ValueError``
    naming ``name`` otherwise): checked before anything is sent, as Redis would refuse
    some only midway through a script."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not (0 < value <= _MAX_SECONDS):  # NaN too
        raise ValueError(f"{name} must be above 0 and at most {_MAX_SECONDS:g} s, not {value!r}")
    return float(value)


def check_ms(name: str, value: object) -> None:
    """:func:`check_seconds`, at least a millisecond: Redis expiries are whole ones, and a
    ``ttl_s`` rounded to 0 would mean no expiry at all."""
    if check_seconds(name, value) < 0.001:
        raise ValueError(f"{name} must be at least 0.001 s (a millisecond), not {value!r}")


#: The largest count an option may give. A script's Lua numbers print in exponent form
#: from 10**14 on (``-1e+17``), which a command taking an integer refuses.
MAX_COUNT = 10**9


def check_count(name: str, value: object) -> None:
    """``value`` is an int from 1 to :data:`MAX_COUNT` (not a bool, not a float Redis
    would refuse)."""
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_COUNT:
        raise ValueError(f"{name} must be at least 1 and at most {MAX_COUNT}, not {value}")
