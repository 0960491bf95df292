"""The rollout's business guardrail: the sample each arm needs, computed up
front; no promotion before it; a rollback on a significant conversion drop
alone (latency and errors normal); and the arms' figures followed from the
gateways' impression and event logs."""

import dataclasses
import json

import pytest

from recserve_delivery.outcomes import Cell, required_lists
from recserve_delivery.rollout import Plan, Rollout
from recserve_delivery.state import Guardrail, RolloutState, Triggers, judge
from recserve_delivery.windows import VersionWindow
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


def test_the_sample_is_the_two_proportion_formula():
    # 10% -> 8%, one-sided 5%, power 80%: about 2,530 lists an arm (the
    # textbook two-sided figure for the same rates is about 3,200).
    assert 2500 < GUARD.required_lists < 2560
    assert required_lists(0.1, 0.1, 0.05, 0.8) > 3.5 * GUARD.required_lists  # half the drop
    assert required_lists(0.1, 0.2, 0.05, 0.9) > GUARD.required_lists  # more power
    assert required_lists(0.3, 0.2, 0.05, 0.8) < GUARD.required_lists  # a higher rate


def test_no_promotion_before_the_sample_even_when_soaked():
    need = GUARD.required_lists
    arms = {"stable": Cell(lists=need - 1, converted=250), "candidate": Cell(lists=need)}
    verdict = judge(guarded(), dataclasses.replace(healthy(), arms=arms), 0.3, now=100)
    assert verdict.action == "hold" and "guardrail sample" in verdict.reason
    assert verdict.figures["guardrail_required_lists"] == need
    without = judge(guarded(guardrail=None), healthy(), 0.3, now=100)
    assert without.action == "promote"


@pytest.mark.parametrize(
    ("candidate_converted", "action"),
    [(200, "rollback"), (255, "rollback"), (280, "promote"), (300, "promote")],
)
def test_a_significant_drop_alone_rolls_back(candidate_converted, action):
    n = 3000
    arms = {
        "stable": Cell(lists=n, converted=300),
        "candidate": Cell(lists=n, converted=candidate_converted),
    }
    verdict = judge(guarded(), dataclasses.replace(healthy(), arms=arms), 0.3, now=100)
    assert verdict.action == action, verdict.reason
    if action == "rollback":
        assert f"conversion {candidate_converted / n:.2%} vs stable 10.00%" in verdict.reason
        assert verdict.figures["p99_ms"] < 150  # latency was fine: the guardrail alone


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
    for n in range(40):
        version = "v1" if n % 2 else "v2"
        lists.append({"recommendation_id": f"r{n}", "at": 1001.0, "model_version": version,
                      "arm": "", "surface": "home", "items": [str(n)]})  # fmt: skip
    lists.append({**lists[0], "recommendation_id": "old", "at": 999.0})  # before the rollout
    write(impressions, lists)
    # Every stable list converts, no candidate list does.
    write(events, [{"event_id": f"e{n}", "recommendation_id": f"r{n}", "item_id": str(n),
                    "event_type": "click", "value": 0.0} for n in range(1, 40, 2)])  # fmt: skip
    verdict = rollout.tick(0.3, healthy())
    assert verdict is not None and verdict.action == "rollback", verdict.reason
    assert verdict.figures["stable_lists"] == 20 and verdict.figures["candidate_lists"] == 20
    assert verdict.figures["stable_conversion"] == 1.0
    assert rollout.state.status == "rolled_back" and "conversion 0.00%" in rollout.state.reason
