"""HLT-004 broken: the count of failed calls is not saved; a state in RETRY is written as
"after its first failure".

``to_dict()`` stores ``failures=1`` for any state in RETRY, the way PenguiFlow's version 1
states (which keep no count) are upgraded. A memory restored after *n* > 1 failed attempts
is granted *n - 1* retries more than ``retry_attempts`` before it degrades. Everything
observable right after the restore (view, health, tokens) is unchanged.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-004"
COLLATERAL = {
    "HLT-002": (
        "the count it loses also times the next retry: a state saved after two failed calls "
        "waits retry 1's backoff from the load, not retry 2's (a loaded state keeps its count)"
    ),
}


class ForgetfulCountMemory(DefaultShortTermMemory):
    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["failures"] = 1 if data["health"] == "retry" else 0  # MUTATION: count not kept
        return data


provider = mutant_provider("hlt004-failure-count-not-persisted", ForgetfulCountMemory)
