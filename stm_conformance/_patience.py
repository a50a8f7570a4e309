"""How long checks wait for a backend to reach a required state (``--stm-patience``).

A check that requires something to happen eventually (DEGRADED after the retries, a
callback, ``flush()`` returning) can only fail by waiting. The waits are generous by
default, sized for a loaded CI machine and a remote server; ``--stm-patience`` scales
them all: below 1 for quicker verdicts against a fast in-process backend, above 1 for a
slow one. It never changes what passes, only how long a failing check takes to say so,
and how slow a passing backend may be.

The loop watchdog's thresholds (``_deadline``) are not waits for the backend and do not
scale.
"""

from __future__ import annotations

import math

__all__ = ["DEFAULT", "factor", "patient", "set_factor"]

DEFAULT = 1.0
_factor = DEFAULT


def set_factor(value: float) -> None:
    """Set the factor for this process (the plugin does, at configure time)."""
    global _factor
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"patience must be a number > 0, got {value!r}")
    _factor = float(value)


def factor() -> float:
    return _factor


def patient(seconds: float) -> float:
    """``seconds`` of waiting, scaled by the patience factor."""
    return seconds * _factor
