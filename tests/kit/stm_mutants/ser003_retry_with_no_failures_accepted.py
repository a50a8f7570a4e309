"""SER-003 broken: a version 2 state in RETRY that counts no failed calls loads.

The loader refuses a HEALTHY state that counts failed calls, but checks the other half of
the rule as ``failures > retry_attempts`` only ("a RETRY state cannot have used up its
retries"), so ``{"health": "retry", "failures": 0}`` is loaded as it stands. Spec 1.4.0:
a state "that counts failed calls while HEALTHY or none while in RETRY" is malformed.
Loaded, its next failure counts as the first and the memory gets one retry more than it
was configured with. Everything else loads as in the reference.
"""

from __future__ import annotations

from reference_impl import schema

from . import mutant_provider
from ._util import own_loads_only

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}


def _check_failures(model: schema.MemoryStateV2) -> None:
    if model.health == "healthy" and model.failures:
        raise ValueError(
            f"invalid memory state: a healthy memory counts no failed calls, not {model.failures}"
        )
    # MUTATION: RETRY with no failed call counted is not refused.


provider = mutant_provider(
    "ser003-retry-with-no-failures-accepted",
    own_loads_only(schema, "_check_failures", _check_failures),
)
