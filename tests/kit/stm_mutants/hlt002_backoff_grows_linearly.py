"""HLT-002 broken: retry *n* waits ``retry_backoff_base_s * n`` (linear, not doubling).

"Exponential" backoff written as base times the attempt number: retry 1 waits ``base``
and retry 2 ``2 * base``, as the spec has it, but retry 3 waits ``3 * base`` where the
spec gives ``4 * base`` (and retry 4 ``4 * base`` for ``8 * base``). Spec, HLT-002: "the
memory itself MUST schedule retry *n* after ``retry_backoff_base_s * 2**(n-1)`` seconds".
"""

from __future__ import annotations

from reference_impl.health import HealthMachine

from . import mutant_provider
from ._util import with_health

BREAKS = "HLT-002"
COLLATERAL: dict[str, str] = {}


class LinearBackoffHealth(HealthMachine):
    __slots__ = ()

    def _retry_wait_s(self) -> float:
        return self.backoff_base_s * self.failures  # MUTATION: base * n, not base * 2**(n-1)


provider = mutant_provider("hlt002-backoff-grows-linearly", with_health(LinearBackoffHealth))
