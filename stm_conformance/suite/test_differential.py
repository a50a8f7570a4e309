"""The backend against the kit's executable model of the spec, driven by random operations."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from stm_conformance.stateful import MemoryDifferential, requirement_of

pytestmark = [pytest.mark.stm_capability("rolling_summary")]

# The first ID is the one blamed for a failure that names none (an exception raised by the
# backend); every other failure names the requirement of the model rule it contradicts.
MODELLED = (
    "WM-002", "WM-003", "WM-004", "WM-005", "WM-006", "WM-007",
    "BUD-001", "BUD-002", "BUD-003", "BUD-004", "BUD-005", "BUD-008", "BUD-010",
    "STR-003", "STR-004", "HLT-004", "HLT-006", "SER-002",
)  # fmt: skip


@pytest.mark.stm_requirement(*MODELLED)
def test_backend_matches_the_spec_model(stm_provider, stm_capabilities, stm_seed):
    machine = type(
        "Differential",
        (MemoryDifferential,),
        {"provider": stm_provider, "serialization": "serialization" in stm_capabilities},
    )
    try:
        run_state_machine_as_test(
            machine,
            settings=settings(
                deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
                # No shrinking: the failure names its requirement and the operations before
                # it, and shrinking a slow or hanging backend's run can outlast the deadline.
                phases=[Phase.explicit, Phase.reuse, Phase.generate],
            ),
        )
    except Flaky as exc:
        # The same operations passed once and failed once: the backend's outcome depends on
        # scheduling. Say so, with what failed, instead of hypothesis' "inconsistent results".
        inner = _first_assertion(exc)
        requirement = requirement_of(inner) if inner is not None else None
        seen = f"{type(inner).__name__}: {inner}" if inner is not None else repr(exc)
        again = "rerun as is" if stm_seed is None else f"rerun with --stm-seed={stm_seed}"
        raise AssertionError(
            f"{requirement or MODELLED[0]}: not reproducible (a race in the backend): the "
            f"same operations passed on one run and failed on another ({again} to repeat "
            f"this run). The failure seen:\n{seen}"
        ) from None


def _first_assertion(error: BaseException | None, seen: int = 0) -> BaseException | None:
    """The first assertion inside a hypothesis flakiness error: in its group, its cause
    or its context."""
    if error is None or seen > 20:
        return None
    if isinstance(error, AssertionError):
        return error
    for inner in (*getattr(error, "exceptions", ()), error.__cause__, error.__context__):
        found = _first_assertion(inner, seen + 1)
        if found is not None:
            return found
    return None
