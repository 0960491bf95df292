"""One rollout shared by several ranker replicas (recserve_delivery.replicas):
one writer by a kernel lock that a killed writer releases, followers that read
the writer's state and route each user to the same arm, and the followers'
figures judged with the writer's. The ranker processes: tests/delivery."""

import signal
import subprocess
import sys

from recserve_delivery import state as rollout_state
from recserve_delivery.replicas import ReplicaFigures, WriterLock
from recserve_delivery.rollout import Rollout
from tests.helpers import poll_until
from tests.unit.test_rollout import Clock, plan, window

HOLD_LOCK = """
import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.flock(f.fileno(), fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


def test_one_writer_and_a_killed_writers_lock_goes_to_the_next(tmp_path):
    first, second = WriterLock(tmp_path), WriterLock(tmp_path)
    first.address = "10.0.0.1:50054"
    assert first.try_acquire() and not second.try_acquire()
    assert second.writer_address() == "10.0.0.1:50054"
    first.release()
    assert second.try_acquire() and second.held
    second.release()
    # Another process holds it, then is killed: the kernel lets go.
    lock_file = tmp_path / "rollout" / "ranker.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(lock_file)], stdout=subprocess.PIPE
    )
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    assert not first.try_acquire()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert poll_until(first.try_acquire, 5, 0.05, "the killed writer's lock")


def test_a_follower_routes_each_user_like_the_writer_and_writes_nothing(tmp_path):
    clock = Clock()
    writer = Rollout(tmp_path, "v1", clock)
    follower = Rollout(tmp_path, "v1", clock)
    follower.writer = False
    writer.start(plan(steps_percent=[50.0, 100.0]))
    assert follower.follow() and follower.state.active and not follower.follow()
    users = [str(n) for n in range(500)]
    arms = {follower.version_for(u) for u in users}
    assert arms == {"v1", "v2"}
    assert [follower.version_for(u) for u in users] == [writer.version_for(u) for u in users]
    before = rollout_state.path(tmp_path).read_text()
    follower.rebase("v9", "a follower's own idea")
    assert rollout_state.path(tmp_path).read_text() == before  # the writer's file stands
    writer.abort()
    assert follower.follow() and follower.state.status == "aborted"
    assert {follower.version_for(u) for u in users} == {"v1"}


def test_the_writer_judges_the_followers_figures_with_its_own(tmp_path):
    clock = Clock()
    writer = Rollout(tmp_path, "v1", clock)
    writer.start(plan(min_requests=20))
    step = writer.state.step_started_at
    mine = ReplicaFigures(tmp_path, me="writer")
    # A follower's window of this step (15 fast calls), one of an earlier step
    # (ignored) and the writer's own file (ignored: its own are in memory).
    ReplicaFigures(tmp_path, me="follower-a").publish(step, {"v2": window([10] * 15)})
    ReplicaFigures(tmp_path, me="follower-b").publish(step - 5, {"v2": window([900] * 50)})
    mine.publish(step, {"v2": window([900] * 50)})
    for _ in range(5):
        writer.completed("v2", 0.01)
    clock.now += 11
    verdict = writer.tick(0.2, others=mine.others(step))
    assert verdict is not None and verdict.action == "promote", verdict
    assert verdict.figures["requests"] == 20
    # Errors seen by a follower alone roll the candidate back.
    step = writer.state.step_started_at
    ReplicaFigures(tmp_path, me="follower-a").publish(step, {"v2": window([10] * 30, errors=5)})
    for _ in range(30):
        writer.completed("v2", 0.01)
    clock.now += 11
    verdict = writer.tick(0.2, others=mine.others(step))
    assert verdict is not None and verdict.action == "rollback", verdict
    assert writer.state.status == "rolled_back"
