"""The unattended cycle's own logic (recserve_stack.retrain): one cycle at a
time, a dead cycle's lock taken over (also where its pid lives on), and "nothing new" judged against
what the current artifact was built from. The whole cycle on the real
stack: tests/delivery/test_shop_cycles.py."""

import json
import os
import subprocess
import sys

import pytest

from pipelines.current import candidate_line
from recserve.ranker.v1 import ranker_pb2 as pb
from recserve_model import artifacts
from recserve_stack.retrain import (
    PIPELINES_NICENESS,
    RetrainRefused,
    candidate_version,
    lower_priority,
    nothing_new,
    one_at_a_time,
    since_last_start,
)


def test_one_cycle_at_a_time_and_a_dead_ones_lock_is_taken_over(tmp_path):
    with one_at_a_time(tmp_path) as note:
        assert note == ""
        assert (tmp_path / "retrain" / "LOCK").read_text() == str(os.getpid())
        refused = pytest.raises(RetrainRefused, match=f"a retrain is running \\(pid {os.getpid()}")
        with refused, one_at_a_time(tmp_path):
            pass
    assert (tmp_path / "retrain" / "LOCK").read_text() == ""  # held by nobody
    (tmp_path / "retrain" / "LOCK").write_text("999999999")  # no such process
    with one_at_a_time(tmp_path) as note:
        assert note == "took over the lock of pid 999999999, which is gone"


def test_a_lock_naming_a_live_pid_but_held_by_nobody_is_taken(tmp_path):
    """A pod's cycle runs as pid 1: after the pod is killed mid-cycle, the
    next pod's pid 1 is alive, yet nothing holds the lock any more."""
    (tmp_path / "retrain").mkdir()
    (tmp_path / "retrain" / "LOCK").write_text(str(os.getpid()))
    with one_at_a_time(tmp_path) as note:
        assert note == f"took over the lock of pid {os.getpid()}, which is gone"


def test_a_cycle_killed_mid_way_lets_go_of_the_lock(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from recserve_stack.retrain import one_at_a_time\n"
            "with one_at_a_time(Path(sys.argv[1])):\n"
            "    print('held', flush=True); sys.stdin.read()",  # held until killed
            str(tmp_path),
        ],
        stdin=subprocess.PIPE,  # never written: the holder waits until it is killed
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RetrainRefused, match=f"pid {holder.pid}"), one_at_a_time(tmp_path):
            pass
    finally:
        holder.kill()  # mid-cycle, as a pod's deadline would
        holder.communicate()
    with one_at_a_time(tmp_path) as note:
        assert note == f"took over the lock of pid {holder.pid}, which is gone"


def dataset(directory, events: int, changes: int):
    directory.mkdir(parents=True)
    counts = {"events_used": events, "catalogue_changes": changes}
    (directory / "snapshot.json").write_text(json.dumps(counts))
    return directory


def test_nothing_new_is_judged_against_what_the_current_artifact_learned(tmp_path):
    built_from = dataset(tmp_path / "snapshots" / "monday", 120, 3)
    directory = artifacts.artifacts_root(tmp_path / "data") / "shop-1"
    directory.mkdir(parents=True)
    artifacts.write_manifest(directory, "shop-1", {"dataset_dir": str(built_from)})
    artifacts.set_current(tmp_path / "data", "shop-1")
    same = dataset(tmp_path / "snapshots" / "tuesday", 120, 3)
    assert "no new events or catalogue changes since shop-1" in nothing_new(tmp_path / "data", same)
    more = dataset(tmp_path / "snapshots" / "wednesday", 121, 3)
    assert nothing_new(tmp_path / "data", more) == ""
    export = tmp_path / "export"
    export.mkdir()  # built from the export itself: nothing beyond it yet
    artifacts.write_manifest(directory, "shop-1", {"dataset_dir": str(export)})
    assert nothing_new(tmp_path / "data", dataset(tmp_path / "empty", 0, 0))
    assert nothing_new(tmp_path / "data", more) == ""


def test_the_cycle_reads_the_version_a_candidate_build_names():
    """The build's own candidate line (pipelines.current), among its other output."""
    line = candidate_line("shop-1a2b3c4d5e6f", "shop-000000000000")
    output = f"artifact data/artifacts/shop-1a2b3c4d5e6f (built); Triton versions {{}}\n{line}\n"
    assert candidate_version(output) == "shop-1a2b3c4d5e6f"
    assert candidate_version("the dataset fails validation: nothing was built\n") is None


def test_the_cycles_pipelines_wait_asleep_unless_the_operator_says(monkeypatch):
    """Beside the serving stack, OpenMP's spinning threads doubled the build's CPU."""
    from recserve_stack.retrain import pipelines_environment

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("RECSERVE_STACK_DATA_DIR", "/somewhere")
    environment = pipelines_environment()
    assert environment["OMP_WAIT_POLICY"] == "PASSIVE"
    assert environment["RECSERVE_STACK_DATA_DIR"] == "/somewhere"  # the rest passes through
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert pipelines_environment()["OMP_WAIT_POLICY"] == "ACTIVE"


def test_a_cycles_report_holds_its_own_rollouts_decisions():
    """The ranker's history holds earlier rollouts' decisions too: a cycle
    that started within a second of the last one's promotion once reported
    that promotion as its first decision."""
    history = [
        pb.RolloutDecision(action=action, at_unix_s=at)
        for action, at in [("start", 1), ("promote", 10), ("start", 10), ("step", 11)]
    ]
    assert [d.action for d in since_last_start(history)] == ["start", "step"]
    assert [d.action for d in since_last_start(history[3:])] == ["step"]  # its start scrolled out


def test_the_cycles_pipeline_steps_run_below_the_serving_stacks_priority():
    show = [sys.executable, "-c", "import os; print(os.nice(0))"]
    ours = os.nice(0)
    done = subprocess.run(show, capture_output=True, text=True, preexec_fn=lower_priority)
    assert int(done.stdout) == min(ours + PIPELINES_NICENESS, 19)
