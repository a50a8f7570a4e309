"""Pure transitions of ``reference_impl.health.HealthMachine`` (spec group HLT), no event loop."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import DEGRADED, HEALTHY, RECOVERING, RETRY

from reference_impl.health import HealthMachine
from reference_impl.types import MemoryHealth


def machine(retry_attempts: int = 3, base: float = 2.0, interval: float = 30.0) -> HealthMachine:
    return HealthMachine(retry_attempts, base, interval)


@pytest.mark.requirement("HLT-001")
def test_new_machine_is_healthy_and_may_call_at_once() -> None:
    health = machine()
    assert health.state is HEALTHY
    assert health.failures == 0
    assert health.wait_s(now=123.0) == 0.0
    assert not health.degraded


@pytest.mark.requirement("HLT-001")
def test_health_is_a_str_enum_with_the_documented_values() -> None:
    assert [h.value for h in MemoryHealth] == ["healthy", "retry", "degraded", "recovering"]
    assert all(isinstance(h, str) for h in MemoryHealth)
    assert MemoryHealth("retry") is RETRY


@pytest.mark.requirement("HLT-002", "HLT-006")
def test_restarted_timers_count_from_the_restart() -> None:
    health = machine(retry_attempts=3, base=2.0, interval=30.0)
    health.not_before = 99.0
    health.restart_timers(now=0.0)
    assert health.wait_s(now=0.0) == 0.0  # HEALTHY: a call may start at once
    health.on_failure(now=0.0)
    health.on_failure(now=0.0)
    health.restart_timers(now=50.0)
    assert health.wait_s(now=50.0) == 4.0  # retry 2 waits base * 2
    for _ in range(2):
        health.on_failure(now=0.0)
    assert health.state is DEGRADED
    health.restart_timers(now=50.0)
    assert health.wait_s(now=50.0) == 30.0
    health.begin_recovery(now=0.0)
    health.restart_timers(now=50.0)
    assert health.wait_s(now=50.0) == 30.0


@pytest.mark.requirement("HLT-002")
def test_first_failure_moves_healthy_to_retry() -> None:
    health = machine()
    assert health.on_failure(now=10.0) == (HEALTHY, RETRY)
    assert health.failures == 1


@pytest.mark.requirement("HLT-002")
@pytest.mark.parametrize("base", [0.0, 2.0])
def test_thousands_of_retries_never_overflow_the_backoff(base: float) -> None:
    health = machine(retry_attempts=3000, base=base)
    for _ in range(3000):
        health.on_failure(now=0.0)  # 2 ** 1024 overflowed a float here
    assert health.state is RETRY and health.failures == 3000
    assert health.wait_s(now=0.0) == base * 2.0**1000
    assert health.on_failure(now=0.0) == (RETRY, DEGRADED)


@pytest.mark.requirement("HLT-002")
@pytest.mark.parametrize("retry_attempts", [1, 2, 3, 6])
@pytest.mark.parametrize("base", [0.001, 0.5, 2.0])
def test_retry_n_waits_base_times_two_to_the_n_minus_one(retry_attempts: int, base: float) -> None:
    health = machine(retry_attempts=retry_attempts, base=base)
    now = 100.0
    for n in range(1, retry_attempts + 1):
        health.on_failure(now)
        assert health.state is RETRY
        assert health.wait_s(now) == pytest.approx(base * 2 ** (n - 1))
        # Half-way through the backoff the retry may not start yet; at its end it may.
        assert health.wait_s(now + base * 2 ** (n - 1) / 2) > 0
        assert health.wait_s(now + base * 2 ** (n - 1)) == 0.0
        now += 1000.0


@pytest.mark.requirement("HLT-004")
@pytest.mark.parametrize("retry_attempts", [0, 1, 3, 5])
def test_degrades_after_first_attempt_and_retry_attempts_retries_fail(retry_attempts: int) -> None:
    health = machine(retry_attempts=retry_attempts, interval=30.0)
    for _ in range(retry_attempts):
        health.on_failure(now=0.0)
        assert health.state is RETRY
    old = health.state
    assert health.on_failure(now=5.0) == (old, DEGRADED)
    assert health.failures == retry_attempts + 1
    assert health.degraded
    # Recovery is not attempted before degraded_retry_interval_s has passed.
    assert health.wait_s(5.0) == pytest.approx(30.0)
    assert health.wait_s(35.0) == 0.0


@pytest.mark.requirement("HLT-004")
def test_retry_attempts_zero_degrades_on_the_first_failure() -> None:
    health = machine(retry_attempts=0)
    assert health.on_failure(now=0.0) == (HEALTHY, DEGRADED)


@pytest.mark.requirement("HLT-004")
@pytest.mark.parametrize("failures_before_success", [1, 2, 3])
def test_success_in_retry_returns_to_healthy_and_resets(failures_before_success: int) -> None:
    health = machine(retry_attempts=3)
    for _ in range(failures_before_success):
        health.on_failure(now=0.0)
    assert health.on_success() == (RETRY, HEALTHY)
    assert health.failures == 0
    assert health.wait_s(0.0) == 0.0
    # The count restarts: the next failure waits the first backoff again.
    health.on_failure(now=0.0)
    assert health.wait_s(0.0) == pytest.approx(2.0)


@pytest.mark.requirement("HLT-006")
def test_recovery_starts_only_from_degraded_and_is_rate_limited() -> None:
    health = machine(retry_attempts=0, interval=30.0)
    with pytest.raises(RuntimeError):
        health.begin_recovery(now=0.0)
    health.on_failure(now=0.0)
    assert health.begin_recovery(now=30.0) == (DEGRADED, RECOVERING)
    assert health.degraded  # RECOVERING still shows recent turns only
    # A second recovery cannot start while one is running.
    with pytest.raises(RuntimeError):
        health.begin_recovery(now=31.0)


@pytest.mark.requirement("HLT-006")
def test_failed_recovery_returns_to_degraded_and_waits_a_full_interval() -> None:
    health = machine(retry_attempts=1, interval=30.0)
    health.on_failure(now=0.0)
    health.on_failure(now=0.0)
    failures = health.failures
    health.begin_recovery(now=30.0)
    assert health.on_failure(now=40.0) == (RECOVERING, DEGRADED)
    assert health.failures == failures  # recovery failures do not restart the retry ladder
    assert health.wait_s(40.0) == pytest.approx(30.0)
    assert health.wait_s(69.0) > 0
    assert health.wait_s(70.0) == 0.0


@pytest.mark.requirement("HLT-006")
def test_successful_recovery_returns_to_healthy() -> None:
    health = machine(retry_attempts=0)
    health.on_failure(now=0.0)
    health.begin_recovery(now=30.0)
    assert health.on_success() == (RECOVERING, HEALTHY)
    assert health.failures == 0
    assert not health.degraded
    assert health.wait_s(30.0) == 0.0


@pytest.mark.requirement("HLT-002", "HLT-004", "HLT-006")
@settings(max_examples=200, deadline=None)
@given(
    retry_attempts=st.integers(0, 4),
    events=st.lists(st.sampled_from(["fail", "succeed", "recover"]), max_size=30),
)
def test_transitions_match_the_documented_state_machine(
    retry_attempts: int, events: list[str]
) -> None:
    """Model check: every transition is one of the diagram's, with the documented timers."""
    base, interval = 0.5, 7.0
    health = machine(retry_attempts=retry_attempts, base=base, interval=interval)
    expected_state, expected_failures = HEALTHY, 0
    now = 0.0
    for event in events:
        now += 1.0
        old = health.state
        if event == "recover":
            if old is not DEGRADED:
                with pytest.raises(RuntimeError):
                    health.begin_recovery(now)
                continue
            assert health.begin_recovery(now) == (DEGRADED, RECOVERING)
            expected_state = RECOVERING
            assert health.wait_s(now) == pytest.approx(interval)
        elif event == "succeed":
            assert health.on_success() == (old, HEALTHY)
            expected_state, expected_failures = HEALTHY, 0
            assert health.wait_s(now) == 0.0
        else:
            change = health.on_failure(now)
            if old is RECOVERING:
                expected_state = DEGRADED
                assert health.wait_s(now) == pytest.approx(interval)
            else:
                expected_failures += 1
                if expected_failures <= retry_attempts:
                    expected_state = RETRY
                    assert health.wait_s(now) == pytest.approx(base * 2 ** (expected_failures - 1))
                else:
                    expected_state = DEGRADED
                    assert health.wait_s(now) == pytest.approx(interval)
            assert change == (old, expected_state)
        assert health.state is expected_state
        assert health.failures == expected_failures
        assert health.degraded == (expected_state in (DEGRADED, RECOVERING))
