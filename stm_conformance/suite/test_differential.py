"""The backend and the reference, driven side by side by random operations."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from stm_conformance.stateful import MemoryDifferential

pytestmark = [pytest.mark.stm_capability("rolling_summary")]


@pytest.mark.stm_requirement("WM-002", "WM-003", "WM-005", "BUD-001", "BUD-010", "HLT-004")
def test_backend_matches_the_reference(stm_provider, stm_capabilities):
    machine = type(
        "Differential",
        (MemoryDifferential,),
        {"provider": stm_provider, "serialization": "serialization" in stm_capabilities},
    )
    run_state_machine_as_test(
        machine,
        settings=settings(
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )
