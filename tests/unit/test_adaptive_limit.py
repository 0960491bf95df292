"""The gateway's adaptive bound on requests in flight (AIMD)."""

import pytest
from pydantic import ValidationError

from services.gateway.config import GatewaySettings
from services.gateway.limiter import AdaptiveLimit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def limit(clock: Clock, minimum: int = 2, maximum: int = 64) -> AdaptiveLimit:
    return AdaptiveLimit(
        minimum, maximum, target_s=0.03, backoff=0.9, clock=clock, recovery_s=100.0
    )


def test_starts_at_the_maximum_and_admits_below_it():
    bound = limit(Clock())
    assert bound.current == 64
    assert bound.admits(63) and not bound.admits(64)


def test_a_late_request_lowers_the_bound_at_most_once_per_target_interval():
    clock = Clock()
    bound = limit(clock)
    bound.record(0.05, "", in_flight=10)
    assert bound.limit == pytest.approx(64 * 0.9)
    bound.record(0.05, "", in_flight=10)  # same burst: no second cut
    assert bound.limit == pytest.approx(64 * 0.9)
    clock.now += 0.03
    bound.record(0.05, "", in_flight=10)
    assert bound.limit == pytest.approx(64 * 0.81)


def test_stage_timeouts_lower_it_but_a_dependency_that_is_down_does_not():
    clock = Clock()
    bound = limit(clock)
    bound.record(0.001, "RANKER_UNAVAILABLE", in_flight=1)
    bound.record(0.001, "COLD_START", in_flight=1)
    assert bound.limit == 64
    bound.record(0.016, "RETRIEVER_TIMEOUT", in_flight=1)
    assert bound.limit == pytest.approx(64 * 0.9)


def slow_requests(bound: AdaptiveLimit, clock: Clock, count: int) -> None:
    for _ in range(count):
        clock.now += 1
        bound.record(1.0, "", in_flight=1)


def test_never_below_the_minimum():
    clock = Clock()
    bound = limit(clock)
    slow_requests(bound, clock, 200)
    assert bound.current == 2 and bound.admits(1) and not bound.admits(2)


def test_on_time_requests_raise_it_only_while_it_is_in_use():
    clock = Clock()
    bound = limit(clock)
    slow_requests(bound, clock, 40)
    assert bound.current == 2
    bound.record(0.01, "", in_flight=1)  # 1 of 2 in use: counts as in use
    assert bound.limit == pytest.approx(2.5)
    bound.record(0.01, "", in_flight=1)  # 1 of 2.5: idle capacity, no growth
    assert bound.limit == pytest.approx(2.5)
    for _ in range(3000):  # +1/limit each: about limit**2 / 2 requests to get there
        bound.record(0.01, "", in_flight=bound.current)
    assert bound.current == 64  # and never past the maximum


def test_a_quiet_spell_restores_the_maximum_so_a_burst_is_not_shed():
    clock = Clock()
    bound = AdaptiveLimit(2, 64, target_s=0.03, clock=clock, recovery_s=1.0)
    for _ in range(100):  # overload: a late request every target interval
        clock.now += 0.03
        bound.record(1.0, "", in_flight=2)
    assert not bound.admits(2)
    clock.now += 0.5  # overload just ended: still bounded
    assert bound.current == 2 and not bound.admits(2)
    clock.now += 0.5  # a second without a late request
    assert all(bound.admits(n) for n in range(32)) and bound.current == 64


def test_settings_refuse_a_minimum_above_the_maximum():
    with pytest.raises(ValidationError, match="min_in_flight"):
        GatewaySettings(min_in_flight=10, max_in_flight=4)
    with pytest.raises(ValueError, match="minimum"):
        AdaptiveLimit(5, 4, 0.03)
