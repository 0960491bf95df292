"""A/B experiments on the rollout machinery: one split held for a fixed
time, never promoted by the judge, protected by the same triggers, ended by
the clock with every user back on the stable; and the report over the
experiment's window from the gateways' logs."""

import pytest

from recserve_delivery import state as rollout_state
from recserve_delivery.experiment import experiment_report
from recserve_delivery.rollout import Plan, Rollout
from recserve_delivery.state import Triggers
from recserve_delivery.windows import VersionWindow
from recserve_kit.errors import InvalidArgument
from tests.unit.test_guardrail import clicks_rollout, write


def experiment(share: float = 50.0, seconds: float = 60.0, **overrides) -> Plan:
    values = {"candidate": "v2", "steps_percent": [share], "soak_s": 1.0, "min_requests": 5,
              "shadow_percent": 0.0, "triggers": Triggers(), "experiment_s": seconds}  # fmt: skip
    return Plan(**{**values, **overrides})


def figures(latency_ms: float = 10.0, requests: int = 100):
    window = VersionWindow()
    for _ in range(requests):
        window.completed(latency_ms / 1000)
    return window.figures()


def test_an_experiment_holds_its_split_for_its_time_then_every_user_is_back_on_stable(tmp_path):
    now = [1000.0]
    rollout = Rollout(tmp_path, "v1", clock=lambda: now[0])
    rollout.start(experiment(share=30.0, seconds=60.0))
    on_candidate = {u for u in map(str, range(2000)) if rollout.version_for(u) == "v2"}
    assert 0.25 < len(on_candidate) / 2000 < 0.35
    for step in (10.0, 30.0, 59.0):  # soaked, plenty of requests: still no promotion
        now[0] = 1000.0 + step
        verdict = rollout.tick(0.2, figures())
        assert verdict is not None and verdict.action == "hold", verdict.reason
        assert "experiment" in verdict.reason and rollout.state.share_percent == 30.0
    now[0] = 1061.0
    verdict = rollout.tick(0.2, figures())
    assert verdict is not None and verdict.action == "conclude"
    s = rollout.state
    assert (s.status, s.share_percent, s.stable, s.candidate) == ("concluded", 0.0, "v1", "v2")
    assert s.ended_at == 1061.0 and not s.active
    assert all(rollout.version_for(u) == "v1" for u in on_candidate)
    saved = rollout_state.load(tmp_path)
    assert saved is not None and [d.action for d in saved.history] == ["start", "conclude"]
    assert saved.history[-1].share_percent == 30.0  # the split it ended at


def test_a_slow_candidate_ends_an_experiment_early(tmp_path):
    now = [1000.0]
    rollout = Rollout(tmp_path, "v1", clock=lambda: now[0])
    rollout.start(experiment())
    now[0] = 1005.0
    verdict = rollout.tick(0.2, figures(latency_ms=400.0))
    assert verdict is not None and verdict.action == "rollback"
    assert rollout.state.status == "rolled_back" and rollout.state.ended_at == 1005.0


@pytest.mark.parametrize(
    "steps, seconds, field",
    [([5.0, 25.0, 50.0, 100.0], 60.0, "steps_percent"), ([100.0], 60.0, "steps_percent"),
     ([50.0], -1.0, "experiment_s")],
)  # fmt: skip
def test_an_experiment_is_one_split_below_everyone(tmp_path, steps, seconds, field):
    with pytest.raises(InvalidArgument) as refused:
        Rollout(tmp_path, "v1").start(experiment(seconds=seconds, steps_percent=steps))
    assert refused.value.field == field


def test_the_report_covers_the_experiments_window_only(tmp_path):
    now = [1000.0]
    rollout = clicks_rollout(tmp_path, now)
    rollout.start(experiment(seconds=100.0))
    lists = [{"recommendation_id": f"r{n}", "at": 1000.0 + n, "arm": "", "surface": "home",
              "model_version": "v1" if n % 2 else "v2", "items": [str(n)]}
             for n in range(60)]  # fmt: skip
    lists += [{**lists[0], "recommendation_id": "before", "at": 990.0},
              {**lists[1], "recommendation_id": "after", "at": 1200.0}]  # fmt: skip
    write(tmp_path / "events" / "impressions" / "d" / "00-g.jsonl", lists)
    # A third of the stable lists convert, every second candidate list.
    clicks = [n for n in range(60) if (n % 2 and n % 3 == 0) or (not n % 2 and n % 4 == 0)]
    write(tmp_path / "events" / "app" / "d" / "00-g.jsonl",
          [{"event_id": f"e{n}", "recommendation_id": f"r{n}", "item_id": str(n),
            "event_type": "click", "value": 0.0} for n in clicks]
          # A click on a list shown after the end: not the experiment's.
          + [{"event_id": "late", "recommendation_id": "after", "item_id": "1",
              "event_type": "click", "value": 0.0}])  # fmt: skip
    now[0] = 1101.0
    rollout.tick(0.2, figures())
    assert rollout.state.status == "concluded"
    report = experiment_report(tmp_path, rollout.state, now=5000.0, baseline_rate=0.3)
    assert report.arms["stable"].lists == 30 and report.arms["candidate"].lists == 30
    assert report.arms["stable"].converted == 10 and report.arms["candidate"].converted == 15
    assert report.comparison.difference == pytest.approx(15 / 30 - 10 / 30)
    assert report.comparison.low < report.comparison.difference < report.comparison.high
    assert 0 < report.comparison.p_value < 1
    assert report.ended_at == 1101.0 and report.share_percent == 50.0
    assert report.required_lists and report.required_lists > 30 and report.reached is False
    assert report.as_dict()["sample_reached"] is False


def test_an_experiment_of_several_arms_gives_each_its_own_users(tmp_path):
    rollout = Rollout(tmp_path, "v1")
    rollout.start(experiment(share=20.0, more_candidates=("v3", "v4")))
    assert rollout.state.candidates == ["v2", "v3", "v4"]
    assert rollout.state.arms() == {
        "v1": "stable", "v2": "candidate", "v3": "candidate-2", "v4": "candidate-3",
    }  # fmt: skip
    users = [str(n) for n in range(6000)]
    on = {u: rollout.version_for(u) for u in users}
    for version, expected in (("v2", 0.2), ("v3", 0.2), ("v4", 0.2), ("v1", 0.4)):
        share = sum(1 for v in on.values() if v == version) / len(users)
        assert abs(share - expected) < 0.03, (version, share)
    assert on == {u: Rollout(tmp_path, "v1").version_for(u) for u in users}  # persisted, stable


@pytest.mark.parametrize(
    "overrides, field",
    [({"more_candidates": ("v3",), "experiment_s": 0.0, "steps_percent": [50.0, 100.0]},
      "more_versions"),
     ({"more_candidates": ("v2",)}, "more_versions"),
     ({"more_candidates": ("v3",), "steps_percent": [50.0]}, "steps_percent"),
     ({"more_candidates": ("v1",), "steps_percent": [20.0]}, "more_versions")],
)  # fmt: skip
def test_further_arms_only_in_an_experiment_each_once_leaving_users_on_stable(
    tmp_path, overrides, field
):
    with pytest.raises(InvalidArgument) as refused:
        Rollout(tmp_path, "v1").start(experiment(**overrides))
    assert refused.value.field == field


def test_any_arm_tripping_a_trigger_ends_the_experiment_naming_it(tmp_path):
    now = [1000.0]
    rollout = Rollout(tmp_path, "v1", clock=lambda: now[0])
    rollout.start(experiment(share=25.0, more_candidates=("v3",)))
    for _ in range(20):
        rollout.completed("v2", 0.01)
        rollout.completed("v3", 0.4)  # the second arm is slow
    now[0] = 1005.0
    verdict = rollout.tick(0.2)
    assert verdict is not None and verdict.action == "rollback"
    assert verdict.reason.startswith("v3: median 400 ms")
    assert rollout.state.status == "rolled_back"
    assert {rollout.version_for(u) for u in map(str, range(500))} == {"v1"}


def test_the_report_compares_every_arm_with_the_stable_corrected_for_several(tmp_path):
    now = [1000.0]
    rollout = clicks_rollout(tmp_path, now)
    rollout.start(experiment(share=25.0, seconds=100.0, more_candidates=("v3",)))
    versions = ["v1", "v2", "v3"]
    lists = [{"recommendation_id": f"r{n}", "at": 1000.0 + n / 10, "arm": "", "surface": "home",
              "model_version": versions[n % 3], "items": [str(n)]}
             for n in range(300)]  # fmt: skip
    write(tmp_path / "events" / "impressions" / "d" / "00-g.jsonl", lists)
    # The stable converts a fifth of its lists, v2 the same, v3 every one.
    clicks = [n for n in range(300) if n % 3 == 2 or (n % 3 < 2 and n % 5 == 0)]
    write(tmp_path / "events" / "app" / "d" / "00-g.jsonl",
          [{"event_id": f"e{n}", "recommendation_id": f"r{n}", "item_id": str(n),
            "event_type": "click", "value": 0.0} for n in clicks])  # fmt: skip
    now[0] = 1101.0
    rollout.tick(0.2, figures())
    report = experiment_report(tmp_path, rollout.state, now=5000.0, baseline_rate=0.2)
    assert {a: c.lists for a, c in report.arms.items()} == {
        "stable": 100, "candidate": 100, "candidate-2": 100,
    }  # fmt: skip
    assert report.versions == {"stable": "v1", "candidate": "v2", "candidate-2": "v3"}
    same, better = report.comparisons["candidate"], report.comparisons["candidate-2"]
    assert same.difference == pytest.approx(0.0, abs=0.03) and same.p_value > 0.05
    assert better.difference > 0.5 and better.p_value < 1e-6
    # Bonferroni: each interval at 97.5%, wider than one comparison's 95%.
    from recserve_delivery.outcomes import compare

    single = compare(report.arms["stable"], report.arms["candidate-2"])
    assert better.high - better.low > single.high - single.low
    assert better.p_value == pytest.approx(min(1.0, single.p_value * 2))
    shown = report.as_dict()
    assert shown["correction"] == "bonferroni" and set(shown["comparisons"]) == {
        "candidate", "candidate-2",
    }  # fmt: skip
    # The sample is planned at alpha 0.05 split between the two arms.
    from recserve_delivery.outcomes import required_lists

    assert report.required_lists == required_lists(0.2, 0.02, 0.025, 0.8)
