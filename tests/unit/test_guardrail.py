"""The rollout's business guardrail, a sequential test (mSPRT): no
promotion until the candidate is shown no worse than the minimum drop; a
rollback on a significant conversion drop alone (latency and errors
normal), as soon as the evidence suffices and never more often than alpha
under the null however often the judge looks; a start that states when the
decision is expected at the traffic measured, and refuses one beyond its
bound; and the arms' figures followed from the gateways' logs."""

import dataclasses
import json

import numpy as np
import pytest

from recserve_delivery.outcomes import Cell, compare, required_lists
from recserve_delivery.rollout import Plan, Rollout
from recserve_delivery.sequential import evidence, lists_to_decide, smallest_drop
from recserve_delivery.state import Guardrail, RolloutState, Triggers, judge
from recserve_delivery.windows import VersionWindow
from recserve_kit.errors import InvalidArgument
from recserve_model.catalogue import CatalogueSchema, EventKind

GUARD = Guardrail(baseline_rate=0.1, min_detectable_drop=0.2, alpha=0.05, power=0.8)


def healthy():
    window = VersionWindow()
    for _ in range(100):
        window.completed(0.01)
    return window.figures()


def guarded(**overrides):
    values = {"stable": "v1", "candidate": "v2", "status": "running", "step_started_at": 0.0,
              "min_requests": 20, "soak_s": 10.0, "guardrail": GUARD}  # fmt: skip
    return RolloutState(**{**values, **overrides})


def test_the_fixed_sample_is_the_two_proportion_formula():
    # An experiment's report: 10% -> 8%, one-sided 5%, power 80%: about
    # 2,530 lists an arm (the textbook two-sided figure is about 3,200).
    assert 2500 < GUARD.required_lists < 2560
    assert required_lists(0.1, 0.1, 0.05, 0.8) > 3.5 * GUARD.required_lists  # half the drop
    assert required_lists(0.3, 0.2, 0.05, 0.8) < GUARD.required_lists  # a higher rate


def test_the_sequential_test_pays_for_its_looks_with_a_larger_sample():
    even = lists_to_decide(0.1, 0.2, 0.05, 0.5)
    assert 2 * GUARD.required_lists < even < 3 * 2 * GUARD.required_lists
    assert lists_to_decide(0.1, 0.1, 0.05, 0.5) > 3.5 * even  # half the drop
    assert lists_to_decide(0.1, 0.2, 0.05, 0.05) > 4 * even  # 5% on the candidate
    assert lists_to_decide(0.3, 0.2, 0.05, 0.5) < even  # a higher rate
    # The smallest drop decided in a day at 30 lists a second, 5% on the candidate.
    drop = smallest_drop(0.1, 0.05, 0.05, 30.0, 86400.0)
    assert (
        lists_to_decide(0.1, drop, 0.05, 0.05)
        <= 30 * 86400
        < lists_to_decide(0.1, drop * 0.98, 0.05, 0.05)
    )


def test_no_promotion_until_the_candidate_is_shown_no_worse_even_when_soaked():
    few = {"stable": Cell(lists=500, converted=50), "candidate": Cell(lists=500, converted=50)}
    verdict = judge(guarded(), dataclasses.replace(healthy(), arms=few), 0.3, now=100)
    assert verdict.action == "hold" and "not yet shown no worse than -20%" in verdict.reason
    assert verdict.figures["guardrail_not_worse_p"] > 0.05
    assert "a decision in about" in verdict.reason  # at the traffic since the start
    many = {"stable": Cell(lists=6000, converted=600), "candidate": Cell(lists=6000, converted=600)}
    verdict = judge(guarded(), dataclasses.replace(healthy(), arms=many), 0.3, now=100)
    assert verdict.action == "promote", verdict.reason
    assert verdict.figures["guardrail_not_worse_p"] <= 0.05
    without = judge(guarded(guardrail=None), healthy(), 0.3, now=100)
    assert without.action == "promote"


@pytest.mark.parametrize(
    ("candidate_converted", "action"),
    [(700, "rollback"), (850, "rollback"), (930, "promote"), (1000, "promote"), (1100, "promote")],
)
def test_a_significant_drop_alone_rolls_back(candidate_converted, action):
    n = 10_000
    arms = {
        "stable": Cell(lists=n, converted=1000),
        "candidate": Cell(lists=n, converted=candidate_converted),
    }
    verdict = judge(guarded(), dataclasses.replace(healthy(), arms=arms), 0.3, now=100)
    assert verdict.action == action, verdict.reason
    if action == "rollback":
        assert f"conversion {candidate_converted / n:.2%} vs stable 10.00%" in verdict.reason
        assert "always-valid p" in verdict.reason
        assert verdict.figures["p99_ms"] < 150  # latency was fine: the guardrail alone


def test_a_candidate_far_better_than_a_stable_that_hardly_converts_is_promoted():
    """The mixture's spread is the operator's baseline's, fixed up front: a
    stable converting 1% leaves a margin of almost nothing, and the evidence
    that the candidate is no worse still comes."""
    arms = {"stable": Cell(lists=200, converted=2), "candidate": Cell(lists=200, converted=120)}
    verdict = judge(guarded(), dataclasses.replace(healthy(), arms=arms), 0.3, now=100)
    assert verdict.action == "promote", verdict.reason


def test_looking_every_fifty_lists_keeps_false_rollbacks_under_alpha():
    """Equal arms (10%), a look after every 50 lists each up to 5,000: the
    sequential test rolls back fewer than alpha of 300 such rollouts; the
    fixed test applied at every look (peeking) rolls back far more."""
    rng = np.random.default_rng(11)
    sequential_alarms = peeking_alarms = 0
    for _ in range(300):
        stable = rng.random((100, 50)) < 0.1
        candidate = rng.random((100, 50)) < 0.1
        s_conv, c_conv = stable.sum(1).cumsum(), candidate.sum(1).cumsum()
        seq = peek = False
        for look in range(100):
            a = Cell(lists=50 * (look + 1), converted=int(s_conv[look]))
            b = Cell(lists=50 * (look + 1), converted=int(c_conv[look]))
            seq = seq or evidence(a, b, 0.2, 0.05, 0.1).decision == "rollback"
            peek = peek or compare(a, b, confidence=0.9).high < 0
        sequential_alarms += seq
        peeking_alarms += peek
    assert sequential_alarms / 300 <= 0.05
    assert peeking_alarms / 300 > 0.15


def write(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.writelines(json.dumps(r) + "\n" for r in records)


def clicks_rollout(data_dir, now: list[float]) -> Rollout:
    """A rollout from stable v1, whose artifact declares one event type
    (click, positive), on a clock the test moves."""
    (data_dir / "artifacts" / "v1").mkdir(parents=True)
    CatalogueSchema({}, {"click": EventKind("positive")}).save(data_dir / "artifacts" / "v1")
    return Rollout(data_dir, "v1", clock=lambda: now[0])


def test_the_rollout_follows_the_logs_for_each_arm(tmp_path):
    now = [1000.0]
    rollout = clicks_rollout(tmp_path, now)
    small = Guardrail(baseline_rate=0.5, min_detectable_drop=0.9, alpha=0.05, power=0.8)
    rollout.start(Plan("v2", [5.0, 100.0], 0.0, 1, 0.0, Triggers(), small))
    impressions = tmp_path / "events" / "impressions" / "d" / "00-g.jsonl"
    events = tmp_path / "events" / "app" / "d" / "00-g.jsonl"
    lists = []
    for n in range(80):
        version = "v1" if n % 2 else "v2"
        lists.append({"recommendation_id": f"r{n}", "at": 1001.0, "model_version": version,
                      "arm": "", "surface": "home", "items": [str(n)]})  # fmt: skip
    lists.append({**lists[0], "recommendation_id": "old", "at": 999.0})  # before the rollout
    write(impressions, lists)
    # Every stable list converts, no candidate list does.
    write(events, [{"event_id": f"e{n}", "recommendation_id": f"r{n}", "item_id": str(n),
                    "event_type": "click", "value": 0.0} for n in range(1, 80, 2)])  # fmt: skip
    verdict = rollout.tick(0.3, healthy())
    assert verdict is not None and verdict.action == "rollback", verdict.reason
    assert verdict.figures["stable_lists"] == 40 and verdict.figures["candidate_lists"] == 40
    assert verdict.figures["stable_conversion"] == 1.0
    assert rollout.state.status == "rolled_back" and "conversion 0.00%" in rollout.state.reason


def impressions_before(data_dir, at: float, count: int) -> None:
    """``count`` stable lists shown in the minutes before ``at``."""
    write(data_dir / "events" / "impressions" / "d" / "00-g.jsonl",
          [{"recommendation_id": f"before{n}", "at": at - 290 + n * 280 / count,
            "model_version": "v1", "arm": "", "surface": "home", "items": ["1"]}
           for n in range(count)])  # fmt: skip


def test_a_start_states_when_the_guardrail_will_decide_and_refuses_beyond_its_bound(tmp_path):
    now = [10_000.0]
    rollout = clicks_rollout(tmp_path, now)
    impressions_before(tmp_path, now[0], 300)  # 1 list a second
    slow = Guardrail(baseline_rate=0.1, min_detectable_drop=0.02, max_decision_s=86400.0)
    with pytest.raises(InvalidArgument, match=r"beyond its bound of 24\.0 h; a minimum drop of"):
        rollout.start(Plan("v2", [5.0, 100.0], 0.0, 1, 0.0, Triggers(), slow))
    assert rollout.state.status == "idle"
    fast = Guardrail(baseline_rate=0.1, min_detectable_drop=0.5)
    rollout.start(Plan("v2", [50.0, 100.0], 0.0, 1, 0.0, Triggers(), fast))
    expected = lists_to_decide(0.1, 0.5, 0.05, 0.5)  # at 1 list a second
    assert rollout.state.measured_lists_per_s == pytest.approx(1.0)
    assert rollout.state.guardrail_decision_by == pytest.approx(now[0] + expected)
    assert "the guardrail's decision in about" in rollout.state.history[-1].reason
