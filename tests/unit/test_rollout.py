"""The rollout's state machine and judge, the user assignment, the shadow
comparison and the persisted state (the ranker process is tested end to end
in tests/delivery)."""

import numpy as np
import pytest

from recserve_delivery import state as rollout_state
from recserve_delivery.rollout import Plan, Rollout, user_position
from recserve_delivery.state import RolloutState, Triggers, judge
from recserve_delivery.windows import VersionWindow
from recserve_kit.errors import FailedPrecondition, InvalidArgument
from services.ranker.shadow import compare


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def plan(**overrides) -> Plan:
    values = {
        "candidate": "v2",
        "steps_percent": [5.0, 25.0, 50.0, 100.0],
        "soak_s": 10.0,
        "min_requests": 20,
        "shadow_percent": 0.0,
        "triggers": Triggers(),
    }
    return Plan(**{**values, **overrides})


def window(latencies_ms=(), errors=0) -> VersionWindow:
    w = VersionWindow()
    for ms in latencies_ms:
        w.completed(ms / 1000)
    for _ in range(errors):
        w.failed()
    return w


def running(**overrides) -> RolloutState:
    values = {"stable": "v1", "candidate": "v2", "status": "running", "step_started_at": 0.0}
    return RolloutState(**{**values, "min_requests": 20, "soak_s": 10.0, **overrides})


def test_a_user_stays_on_one_side_and_the_share_is_about_right():
    positions = [user_position(str(n)) for n in range(20_000)]
    assert positions == [user_position(str(n)) for n in range(20_000)]
    assert all(0 <= p < 100 for p in positions)
    on_candidate = sum(p < 5 for p in positions) / len(positions)
    assert 0.04 < on_candidate < 0.06


def test_judge_holds_until_enough_requests_and_the_soak_then_promotes():
    state = running()
    fast = window([10] * 19)
    assert judge(state, fast.figures(), 0.3, now=30).action == "hold"
    fast.completed(0.01)
    assert judge(state, fast.figures(), 0.3, now=5).reason.startswith("soaking")
    verdict = judge(state, fast.figures(), 0.3, now=11)
    assert verdict.action == "promote"
    assert verdict.figures["requests"] == 20 and verdict.figures["p99_ms"] == pytest.approx(
        10, 0.05
    )


@pytest.mark.parametrize(
    ("w", "memory", "why"),
    [
        (window([200] * 10), 0.3, "median 200 ms"),  # slow: rolled back before min_requests
        (window([10] * 95 + [400] * 5), 0.3, "p99 400 ms"),
        (window([], errors=5), 0.3, "error rate 100.00% (5/5)"),  # broken
        (window([10] * 99, errors=1), 0.3, "error rate 1.00% (1/100)"),
        (window([10] * 20), 0.9, "memory 90.0% > 85.0%"),
    ],
)
def test_judge_rolls_back_on_each_trigger(w, memory, why):
    verdict = judge(running(), w.figures(), memory, now=1)
    assert verdict.action == "rollback"
    assert why in verdict.reason


def test_one_cold_call_neither_rolls_back_nor_promotes_until_a_p99_means_something():
    """Of 20 timed requests the p99 is the slowest: one cold first call over
    the limit holds the step; once 100 are timed, it is judged on them."""
    cold = window([400] + [10] * 19)
    verdict = judge(running(), cold.figures(), 0.3, now=30)
    assert verdict.action == "hold" and "waiting for 100" in verdict.reason, verdict
    for _ in range(100):
        cold.completed(0.01)
    assert judge(running(), cold.figures(), 0.3, now=30).action == "promote"


def test_judge_without_memory_still_decides_and_a_pause_holds_but_still_rolls_back():
    # 1 error in 200 is 0.5%, not above the limit; nor are 4 errors in 4 (too few).
    assert (
        judge(running(), window([10] * 199, errors=1).figures(), None, now=100).action == "promote"
    )
    assert judge(running(), window([], errors=4).figures(), None, now=100).action == "hold"
    paused = running(status="paused")
    assert judge(paused, window([10] * 30).figures(), None, now=100).action == "hold"
    assert judge(paused, window([300] * 30).figures(), None, now=100).action == "rollback"


def test_a_rollout_steps_to_stable_and_every_transition_is_persisted(tmp_path):
    clock = Clock()
    rollout = Rollout(tmp_path, "v1", clock)
    rollout.start(plan())
    assert rollout.state.share_percent == 5
    assert rollout_state.protected_versions(tmp_path) == {"v1", "v2"}
    shares = []
    for _ in range(4):
        for _ in range(20):
            rollout.completed("v2", 0.01)
        clock.now += 11
        verdict = rollout.tick(0.2)
        assert verdict is not None and verdict.action == "promote"
        shares.append(rollout.state.share_percent)
    assert shares == [25, 50, 100, 0]
    assert rollout.state.status == "promoted" and rollout.state.stable == "v2"
    again = rollout_state.load(tmp_path)
    assert again is not None and again.stable == "v2" and again.status == "promoted"
    assert [d.action for d in again.history] == ["start"] + ["promote"] * 4
    assert rollout_state.protected_versions(tmp_path) == {"v2"}


def test_operator_actions_and_their_preconditions(tmp_path):
    rollout = Rollout(tmp_path, "v1", Clock())
    with pytest.raises(FailedPrecondition):
        rollout.pause()
    with pytest.raises(InvalidArgument):
        rollout.start(plan(candidate="v1"))
    with pytest.raises(InvalidArgument):
        rollout.start(plan(steps_percent=[50.0, 25.0, 100.0]))
    with pytest.raises(InvalidArgument):
        rollout.start(plan(steps_percent=[5.0, 50.0]))
    rollout.start(plan())
    with pytest.raises(FailedPrecondition):
        rollout.start(plan())
    with pytest.raises(FailedPrecondition):
        rollout.set_stable("v3")  # LoadModel during a rollout
    rollout.pause()
    assert rollout.version_for("anyone") in {"v1", "v2"}
    rollout.resume()
    rollout.abort()
    assert rollout.state.status == "aborted" and rollout.state.share_percent == 0
    assert {rollout.version_for(str(n)) for n in range(1000)} == {"v1"}


def test_a_restarted_ranker_reads_the_rollout_where_it_was(tmp_path):
    clock = Clock()
    first = Rollout(tmp_path, "v1", clock)
    first.start(plan())
    first.promote()
    second = Rollout(tmp_path, "ignored: the file names the stable version", clock)
    assert second.state.status == "running" and second.state.share_percent == 25
    second.resumed_after_restart()
    assert second.state.history[-1].action == "resume-after-restart"


def test_a_damaged_state_file_is_an_error_not_a_fresh_start(tmp_path):
    path = rollout_state.path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text('{"stable": 3')
    with pytest.raises(rollout_state.RolloutStateError, match="unreadable rollout state"):
        rollout_state.load(tmp_path)


def test_shadow_comparison_figures():
    live = np.arange(50, dtype=np.float32)
    same = compare(live, live.copy())
    assert same == {"overlap": 1.0, "rank_correlation": pytest.approx(1.0), "score_shift": 0.0}
    reversed_ = compare(live, -live)
    assert reversed_["overlap"] == 0.0 and reversed_["rank_correlation"] == pytest.approx(-1.0)
    shifted = compare(live, live + live.std())
    assert shifted["overlap"] == 1.0 and shifted["score_shift"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="score shapes differ"):
        compare(live, live[:5])


def test_tritons_memory_is_the_fullest_gpu_or_else_the_host():
    from services.ranker.triton_metrics import memory_fraction

    gpu = (
        "# TYPE nv_gpu_memory_used_bytes gauge\n"
        'nv_gpu_memory_used_bytes{gpu_uuid="a"} 10\n'
        'nv_gpu_memory_used_bytes{gpu_uuid="b"} 90\n'
        "# TYPE nv_gpu_memory_total_bytes gauge\n"
        'nv_gpu_memory_total_bytes{gpu_uuid="a"} 100\n'
        'nv_gpu_memory_total_bytes{gpu_uuid="b"} 100\n'
        "# TYPE nv_cpu_memory_used_bytes gauge\nnv_cpu_memory_used_bytes 1\n"
        "# TYPE nv_cpu_memory_total_bytes gauge\nnv_cpu_memory_total_bytes 4\n"
    )
    assert memory_fraction(gpu) == 0.9
    host = "nv_cpu_memory_used_bytes 1\nnv_cpu_memory_total_bytes 4\n"
    assert memory_fraction(host) == 0.25
    assert memory_fraction("nv_inference_count 3\n") is None


def test_a_stable_version_gone_from_the_repository_starts_over(tmp_path):
    rollout = Rollout(tmp_path, "v1", Clock())
    rollout.start(plan())
    again = Rollout(tmp_path, "v9", Clock())
    again.rebase("v9", "v1 is not in the repository")
    assert again.state.stable == "v9" and again.state.status == "idle"
    assert again.state.history[-1].action == "reset"
    assert rollout_state.load(tmp_path).stable == "v9"


def test_the_final_promotion_is_recorded_at_the_share_it_reached(tmp_path):
    rollout = Rollout(tmp_path, "v1", Clock())
    rollout.start(plan())
    for _ in range(4):
        rollout.promote()
    last = rollout.state.history[-1]
    assert (rollout.state.status, last.action, last.share_percent) == ("promoted", "promote", 100)


def test_a_tiny_limit_is_shown_as_it_was_set_not_as_zero():
    from recserve_delivery.state import percent

    assert percent(0.0001, 1) == "0.01%"
    assert percent(0.85, 1) == "85.0%" and percent(0.005, 2) == "0.50%"
    w = window([10] * 20)
    verdict = judge(
        RolloutState(
            stable="v1",
            candidate="v2",
            status="running",
            min_requests=20,
            triggers=Triggers(max_memory_fraction=0.0001),
        ),
        w.figures(),
        0.3,
        2000.0,
    )
    assert verdict.reason == "memory 30.0% > 0.01%"
