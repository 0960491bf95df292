"""Two cores' default: one gateway serves and a standby waits. Envoy sends
the standby nothing while the gateway is healthy (priority 1), and a SIGKILL
of the serving gateway under load costs clients no error: calls it held and
new ones are retried on the standby until the runner has it back; a SIGSTOP
(a hung gateway) costs a client with the default settings no error either:
Envoy hedges each call it holds to the standby.

Its own stack: one gateway and a standby, as `make run` starts on two cores
(the e2e stack runs two active gateways)."""

from __future__ import annotations

import asyncio
import os
import signal

import grpc
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families
from recserve_client import ClientOptions, RecserveClient, RetryPolicy

from bench.load import run_load
from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc
from recserve_stack.settings import STANDBY_MARK
from tests.helpers import (
    HEDGED,
    calls_while_frozen,
    data_dir_with_artifacts,
    envoy_counters,
    full_answer,
    poll_until,
)
from tests.stack import running_stack

STANDBY_REPLICA = 1  # metrics: no extra gateway, no canary; the standby is replica 1


@pytest.fixture(scope="module")
def stack(built, tmp_path_factory):
    data_dir = data_dir_with_artifacts(
        tmp_path_factory.mktemp("standby") / "data", built.directory.parents[1]
    )
    with running_stack(data_dir, standby="1") as running:
        yield running


def recommends(stack, replica: int) -> float:
    """Recommend calls a gateway replica has answered."""
    text = stack.metrics("gateway", replica)
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "recserve_rpc_server_duration_seconds_count"
        and s.labels.get("method") == "Recommend"
    )


def serving_gateway(stack) -> int:
    pids = stack.gateway_pids()
    assert len(pids) == 2, pids  # the gateway and the standby
    (pid,) = [p for p in pids if psutil.Process(p).environ().get(STANDBY_MARK) != "standby"]
    return pid


def none_for_the_standby(stack, stub) -> bool | None:
    """A batch of calls of which the standby answers none, or None."""
    before = recommends(stack, STANDBY_REPLICA)
    for user in range(1, 21):
        stub.Recommend(pb.RecommendRequest(user_id=str(user), k=5), timeout=5)
    return recommends(stack, STANDBY_REPLICA) == before or None


def test_the_standby_takes_nothing_while_the_gateway_serves_and_everything_when_it_dies(stack):
    channel = grpc.insecure_channel(stack.envoy_address)
    stub = recommend_pb2_grpc.RecommendServiceStub(channel)
    full_answer(stub)
    # Once Envoy's health checks have seen both (1 s apart), a healthy
    # gateway takes every call of a batch (never, if the standby shared them).
    poll_until(lambda: none_for_the_standby(stack, stub), 30, 0.5, "the gateway to take all")
    idle = recommends(stack, STANDBY_REPLICA)
    gateway = serving_gateway(stack)
    result = asyncio.run(
        run_load(
            stack.envoy_address,
            40,
            5.0,
            users=100,
            event=(2.0, lambda: os.kill(gateway, signal.SIGKILL)),
        )
    )
    assert result.sent == 200 and not result.errors, result.summary()
    took_over = recommends(stack, STANDBY_REPLICA)
    assert took_over > idle  # the retried and redirected calls

    def back():
        pids = stack.gateway_pids()
        return len(pids) == 2 and gateway not in pids

    poll_until(back, 60, 0.2, "the runner to restart the killed gateway")

    # Envoy's health check passes on the restarted gateway (1 s interval).
    poll_until(
        lambda: none_for_the_standby(stack, stub), 30, 0.5, "traffic back on the restarted gateway"
    )
    channel.close()


def test_a_hung_gateway_is_hedged_to_the_standby_before_the_client_gives_up(stack):
    """SIGSTOP of the serving gateway (a pause, a hung process). A call
    that meets it is sent on to the standby after Envoy's per-try timeout
    (0.2 s), the first attempt left open (a hedge), so it answers before the
    client's own attempt timeout (0.3 s, the default) abandons an attempt
    that would only meet the same hung gateway again. Before the hedge, at
    0.5 s per try, such calls failed until the health checks ejected the
    gateway: 16 of 875 calls from four threads, the gateway frozen for
    4 s (CANCELLED)."""
    # The default attempt timeout; more attempts than the default three,
    # because beside the other test workers the standby too can answer late.
    options = ClientOptions(timeout_s=3.0, retry=RetryPolicy(max_attempts=5))
    channel = grpc.insecure_channel(stack.envoy_address)
    stub = recommend_pb2_grpc.RecommendServiceStub(channel)
    full_answer(stub)
    with RecserveClient(stack.envoy_address, options) as client:
        poll_until(lambda: none_for_the_standby(stack, stub), 30, 0.5, "the gateway to take all")
        before, idle = envoy_counters(stack, HEDGED)[HEDGED], recommends(stack, STANDBY_REPLICA)
        # 3 s: until Envoy's health checks eject the frozen gateway.
        calls_while_frozen(client, serving_gateway(stack), 3.0)
        assert recommends(stack, STANDBY_REPLICA) > idle  # the standby answered
        assert envoy_counters(stack, HEDGED)[HEDGED] > before  # ... what Envoy sent it
        poll_until(lambda: none_for_the_standby(stack, stub), 30, 0.5, "the gateway back")
    channel.close()
