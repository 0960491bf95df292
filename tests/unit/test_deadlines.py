import pytest

from recserve_kit.deadlines import RETURN_MARGIN_S, Deadline, outbound_timeout
from recserve_kit.errors import DeadlineExhausted


class FakeContext:
    """Only time_remaining() is used by the deadline helpers."""

    def __init__(self, remaining):
        self.remaining = remaining

    def time_remaining(self):
        return self.remaining


def test_outbound_timeout_is_the_smaller_of_cap_and_remaining():
    assert outbound_timeout(FakeContext(1.0), cap_s=0.02) == 0.02
    assert outbound_timeout(FakeContext(0.01), cap_s=0.02) == pytest.approx(
        0.01 - RETURN_MARGIN_S, abs=1e-3
    )
    assert outbound_timeout(FakeContext(None), cap_s=0.02) == 0.02
    assert outbound_timeout(None, cap_s=0.03) == 0.03


def test_exhausted_budget_raises_before_calling():
    with pytest.raises(DeadlineExhausted):
        outbound_timeout(FakeContext(0.0005), cap_s=0.02)


def test_a_deadline_is_the_smaller_of_the_budget_less_the_queue_and_the_callers():
    assert Deadline(None, budget_s=0.1, spent_s=0.03).remaining_s() == pytest.approx(0.07, abs=1e-3)
    caller_first = Deadline(0.02, budget_s=0.1).remaining_s()
    assert caller_first == pytest.approx(0.02 - RETURN_MARGIN_S, abs=1e-3)
    assert Deadline(None).timeout(0.5) == 0.5  # no limit but the cap
    with pytest.raises(DeadlineExhausted):
        Deadline(None, budget_s=0.1, spent_s=0.2).timeout(0.015)
    with pytest.raises(DeadlineExhausted):
        Deadline(None, budget_s=0.1, floor_s=0.2).timeout(0.3)
