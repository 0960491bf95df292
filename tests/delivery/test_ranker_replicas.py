"""Two rankers on the local stack share one rollout (services/ranker/replica.py):
an operator action sent to the one that follows is applied by the one that
writes; each user is on the same arm from both; an abort reaches both; and a
killed writer's place is taken by the other, mid-rollout.

Its own stack and data dir: a version is published into it."""

from __future__ import annotations

import json
import os
import signal
import time

import grpc
import pytest

from pipelines.rehearsal import make_version
from recserve.features.v1 import features_pb2
from recserve.ranker.v1 import ranker_pb2 as kpb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve_delivery.rollout import user_position
from recserve_kit import transport
from tests.helpers import data_dir_for_versions, free_port, poll_until
from tests.stack import running_stack

USERS = [str(n) for n in range(1, 201)]
WIDE_P99_MS = 5000.0  # a shared machine's stall must not roll this one back


@pytest.fixture(scope="module")
def stack(built, tmp_path_factory):
    data_dir = data_dir_for_versions(
        tmp_path_factory.mktemp("replicas") / "data", built.directory.parents[1]
    )
    second = free_port()
    # One gateway: the cores go to the two rankers.
    extra = {"RECSERVE_STACK_RANKER_EXTRA_PORTS": f"[{second}]"}
    extra["RECSERVE_STACK_ONE_PROCESS"] = "false"  # two ranker processes, killed alone
    with running_stack(data_dir, RECSERVE_STACK_GATEWAY_EXTRA_PORTS="[]", **extra) as running:
        running.env["TEST_SECOND_RANKER"] = f"127.0.0.1:{second}"
        yield running


@pytest.fixture(scope="module")
def rankers(stack):
    """Each ranker's stub by address, and the admin token's metadata."""
    channels = {
        stack.address("ranker"): stack.internal_channel("ranker"),
        stack.env["TEST_SECOND_RANKER"]: transport.channel(
            stack.env["TEST_SECOND_RANKER"], stack.tls
        ),
    }
    yield {a: ranker_pb2_grpc.RankerServiceStub(c) for a, c in channels.items()}
    for channel in channels.values():
        channel.close()


@pytest.fixture(scope="module")
def token(stack):
    admin = (stack.data_dir / "auth" / "admin.token").read_text().strip()
    return [("authorization", f"Bearer {admin}")]


def writer(stack) -> dict:
    return json.loads((stack.data_dir / "rollout" / "ranker.writer.json").read_text())


def roles(stack, rankers):
    """(the writer's stub, the follower's stub), once the writer has published."""
    published = poll_until(lambda: writer(stack).get("address"), 60, 0.2, "the writer's address")
    assert published in rankers, (published, list(rankers))
    follower = next(a for a in rankers if a != published)
    return rankers[published], rankers[follower]


def arms(stub) -> list[str]:
    """The version each of USERS is on, as this ranker answers it."""
    return [
        stub.EmbedUser(
            kpb.EmbedUserRequest(user=features_pb2.UserFeatures(user_id=u)), timeout=10
        ).model_version
        for u in USERS
    ]


def test_an_action_on_either_ranker_is_one_rollout_and_each_user_one_arm(
    stack, rankers, token, built
):
    the_writer, follower = roles(stack, rankers)
    stable = the_writer.GetRollout(kpb.GetRolloutRequest(), metadata=token, timeout=10).status
    candidate = make_version(stack.data_dir, "replica", "copy", source=built.version)
    plan = kpb.StartRolloutRequest(
        version=candidate, steps_percent=[50, 100], soak_s=600, max_p99_ms=WIDE_P99_MS
    )
    started = follower.StartRollout(plan, metadata=token, timeout=180).status  # forwarded
    assert started.status == "running" and started.candidate_version == candidate
    expected = [candidate if user_position(u) < 50 else stable.stable_version for u in USERS]
    # Both route every user as the shared state says, once each has read it.
    poll_until(lambda: arms(follower) == expected, 30, 0.2, "the follower's arms")
    assert arms(the_writer) == expected
    for stub in (the_writer, follower):
        status = stub.GetRollout(kpb.GetRolloutRequest(), metadata=token, timeout=10).status
        assert (status.status, status.share_percent) == ("running", 50)
    aborted = follower.AbortRollout(kpb.AbortRolloutRequest(), metadata=token, timeout=30)
    at = time.monotonic()
    assert aborted.status.status == "aborted"
    everyone_stable = [stable.stable_version] * len(USERS)
    poll_until(lambda: arms(follower) == everyone_stable, 10, 0.05, "the abort at the follower")
    print(f"the abort reached the follower in {time.monotonic() - at:.2f} s")
    assert arms(the_writer) == everyone_stable
    # A bad plan sent to the follower is refused by the writer, named as it named it.
    with pytest.raises(grpc.RpcError) as bad:
        follower.StartRollout(
            kpb.StartRolloutRequest(version=candidate, steps_percent=[50, 10]),
            metadata=token,
            timeout=30,
        )
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "steps_percent" in (bad.value.details() or "")


def test_a_killed_writers_rollout_goes_on_at_the_other_ranker(stack, rankers, token, built):
    the_writer, _ = roles(stack, rankers)
    killed = writer(stack)
    candidate = make_version(stack.data_dir, "takeover", "copy", source=built.version)
    plan = kpb.StartRolloutRequest(
        version=candidate, steps_percent=[25, 100], soak_s=600, max_p99_ms=WIDE_P99_MS
    )
    the_writer.StartRollout(plan, metadata=token, timeout=180)
    os.kill(int(killed["replica"].rsplit("-", 1)[1]), signal.SIGKILL)

    def taken_over():
        now = writer(stack)
        return now if now["replica"] != killed["replica"] else None

    now = poll_until(taken_over, 30, 0.1, "the other ranker to take the rollout")
    survivor = rankers[now["address"]]
    status = survivor.GetRollout(kpb.GetRolloutRequest(), metadata=token, timeout=10).status
    assert status.status == "running" and status.candidate_version == candidate
    assert status.history[-1].action == "resume-after-restart"
    aborted = survivor.AbortRollout(kpb.AbortRolloutRequest(), metadata=token, timeout=30)
    assert aborted.status.status == "aborted"
