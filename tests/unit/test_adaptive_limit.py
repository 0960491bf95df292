"""The gateway's admission: the adaptive bound on requests in flight (AIMD) and
the wait a request may have queued (CoDel)."""

import pytest
from pydantic import ValidationError

from services.gateway.config import GatewaySettings
from services.gateway.limiter import AdaptiveLimit, QueueWait


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


def test_a_burst_after_an_empty_queue_may_wait_up_to_the_long_limit():
    clock = Clock()
    wait = QueueWait(0.025, 0.075, clock=clock)
    assert wait.admits(0.001)  # the burst's first request: the queue was empty
    for queued in (0.02, 0.04, 0.06, 0.074):
        clock.now += 0.004
        assert wait.admits(queued)
    clock.now += 0.004
    assert not wait.admits(0.076), "past the long limit, even in a burst"


def test_a_standing_queue_is_cut_to_the_short_limit_until_it_empties():
    clock = Clock()
    wait = QueueWait(0.025, 0.075, clock=clock)
    assert wait.admits(0.001)
    clock.now += 0.076  # the queue has not been empty for longer than 75 ms
    assert wait.admits(0.02), "within the short limit, always"
    assert not wait.admits(0.03), "a standing queue keeps only the short limit"
    clock.now += 0.01
    assert wait.admits(0.004)  # empty again
    clock.now += 0.01
    assert wait.admits(0.05)


def test_before_the_queue_was_ever_empty_only_the_short_limit_holds():
    wait = QueueWait(0.025, 0.075, clock=Clock())
    assert wait.admits(0.02) and not wait.admits(0.03)
    with pytest.raises(ValueError, match="short_s <= long_s"):
        QueueWait(0.08, 0.075)


def test_the_settings_keep_the_burst_wait_between_the_short_wait_and_the_budget():
    with pytest.raises(ValidationError, match="burst_queue_ms"):
        GatewaySettings(max_queue_ms=30, burst_queue_ms=20)
    with pytest.raises(ValidationError, match="burst_queue_ms"):
        GatewaySettings(burst_queue_ms=100, budget_ms=100)
