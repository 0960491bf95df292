"""The request path in one process (``RECSERVE_STACK_ONE_PROCESS``, the local
runner's default on a small host): the gateway's process hosts the features,
retriever and ranker modules, each still on its own port, and a Recommend's
calls to them stay in the process with their spans and metrics; one such
process per core, the second following the first's writers (the retriever's
index, the features it publishes, the rollout). The rest of the e2e suite
runs against it with RECSERVE_E2E_ONE_PROCESS=true; this module starts such
a stack of its own when the suite runs the backends apart."""

from __future__ import annotations

import re
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc
from recserve.retriever.v1 import retriever_pb2 as rpb
from recserve.retriever.v1 import retriever_pb2_grpc
from tests.e2e.conftest import ONE_PROCESS
from tests.e2e.test_events import token
from tests.helpers import (
    HEDGED,
    calls_while_frozen,
    data_dir_with_artifacts,
    envoy_counters,
    full_answer,
    poll_until,
)
from tests.stack import running_stack

pytestmark = pytest.mark.local_stack_only
HOSTED = ("features", "retriever", "ranker")


@pytest.fixture(scope="module")
def one(built, tmp_path_factory, request):
    """A stack running the request path in one process."""
    if ONE_PROCESS:
        # The suite's shared stack: a test before may have killed the one
        # process, which the runner is still bringing back.
        shared = request.getfixturevalue("stack")
        poll_until(lambda: all(serving(shared, n) for n in HOSTED), 120, 0.2, "the one process")
        yield shared
        return
    data_dir = data_dir_with_artifacts(
        tmp_path_factory.mktemp("one") / "data", built.directory.parents[1]
    )
    with running_stack(data_dir, RECSERVE_STACK_ONE_PROCESS="true") as running:
        yield running


@pytest.fixture(scope="module")
def door(one):
    with grpc.insecure_channel(one.envoy_address) as channel:
        yield recommend_pb2_grpc.RecommendServiceStub(channel)


def calls(metrics: str, service: str, method: str) -> float:
    """How many ``method`` calls the ``service`` module has answered, from
    the duration metric its handler wrapper observes (summed over the
    processes whose metrics ``metrics`` holds)."""
    pattern = (
        r"recserve_rpc_server_duration_seconds_count\{"
        rf'code="OK",method="{method}",service="{service}"\}} (\S+)'
    )
    return sum(float(count) for count in re.findall(pattern, metrics))


def serving(stack, name: str) -> bool:
    """Whether ``name``'s port answers SERVING (the runner's own probe)."""
    return stack.serving(stack.address(name))


def test_once_ready_each_process_answers_whole_from_its_own_modules(one):
    """The runner calls the stack ready once each request-path process and
    every module it hosts serve: the second's own modules (its calls stay in
    it), not the first's at their addresses. The second is started beside
    the first and builds its modules once the first's serve; a Recommend
    sent straight to each gateway at once is whole."""
    for channel in one.gateway_channels():
        with channel:
            health = health_pb2_grpc.HealthStub(channel)
            for module in HOSTED:
                request = health_pb2.HealthCheckRequest(service=f"dependency/{module}")
                status = health.Check(request, timeout=5).status
                assert status == health_pb2.HealthCheckResponse.SERVING, module
            stub = recommend_pb2_grpc.RecommendServiceStub(channel)
            reply = stub.Recommend(pb.RecommendRequest(user_id="42", k=10), timeout=5)
            assert not reply.degraded, pb.DegradedReason.Name(reply.degraded_reason)


def test_one_process_hosts_the_backends_and_each_keeps_its_port(one):
    # One per core (these stacks run a second gateway): the second follows the first's writers.
    assert len(one.component_pids("services.one_process")) == 2
    for name in HOSTED:
        assert one.component_pids(f"services.{name}") == [], name
        assert serving(one, name), name


def both(one) -> str:
    """The /metrics of both request-path processes (Envoy picks one a call)."""
    return one.metrics("gateway") + one.metrics("gateway", replica=1)


def test_a_recommend_runs_each_module_in_the_gateways_process(one, door):
    full_answer(door, "42")
    before = both(one)
    reply = full_answer(door, "43", debug=True)
    after = both(one)
    assert {"features", "retrieve", "rank"} <= {t.stage for t in reply.stage_timings}
    # The modules' own handler wrappers ran, and their metrics are the
    # gateway process's (no port of their own).
    for service, method in (
        ("features", "GetUserFeatures"),
        ("retriever", "Search"),
        ("ranker", "Score"),
    ):
        assert calls(after, service, method) > calls(before, service, method), method


def test_a_killed_one_process_costs_clients_no_error(one, door):
    """SIGKILL of the first request-path process (the one whose retriever
    and features write), under load: the second answers meanwhile, the
    runner restarts the first, and full answers return."""
    errors: list[grpc.StatusCode] = []
    answered: list[bool] = []
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            try:
                reply = door.Recommend(pb.RecommendRequest(user_id="7", k=10), timeout=2)
                answered.append(len(reply.items) == 10)
            except grpc.RpcError as error:
                errors.append(error.code())
            stop.wait(0.02)

    full_answer(door)
    before = one.component_pid("services.one_process")  # the first: the writers'
    worker = threading.Thread(target=load)
    worker.start()
    try:
        one.kill("services.one_process")

        def restarted() -> bool:
            pids = one.component_pids("services.one_process")
            return len(pids) == 2 and before not in pids

        poll_until(restarted, 60, 0.2, "the runner to restart the one process")
        one.wait_whole()
        poll_until(
            lambda: not door.Recommend(pb.RecommendRequest(user_id="8", k=10), timeout=2).degraded,
            120, 0.2, "a full answer from the restarted process",
        )  # fmt: skip
    finally:
        stop.set()
        worker.join()
    assert errors == [] and answered and all(answered)


def test_a_frozen_request_path_process_has_its_calls_hedged_to_the_other(one, door):
    """SIGSTOP of the first request-path process (a pause, a hang: no
    reset for Envoy to see). A call that meets it is hedged to the second
    after Envoy's per-try timeout (0.2 s), before a client's own attempt
    timeout (0.3 s by default); every call answers, and Envoy counts the
    hedges that answered (with the per-try timeout above the client's,
    the client abandoned first and Envoy never moved a call)."""
    from recserve_client import ClientOptions, RecserveClient, RetryPolicy

    full_answer(door)
    # The default attempt timeout; five attempts, not three, because
    # beside the other test workers the second process too can answer late.
    options = ClientOptions(timeout_s=3.0, retry=RetryPolicy(max_attempts=5))
    with RecserveClient(one.envoy_address, options) as client:
        before = envoy_counters(one, HEDGED)[HEDGED]

        def hedged() -> bool:
            # 2 s: before Envoy's health checks eject the frozen process.
            # Another window where none of Envoy's hedges answered first
            # (the second process late too, and the client's attempt gone).
            calls_while_frozen(client, one.component_pid("services.one_process"), 2.0)
            one.wait_whole()
            return envoy_counters(one, HEDGED)[HEDGED] > before

        poll_until(hedged, 20, 0.2, "a call Envoy hedged to the second process")


def test_a_write_through_envoy_reaches_the_second_process(one):
    """The second process's retriever follows the first's change feed: an
    item upserted through Envoy's admin route (the first's retriever, the
    writer) is found through the second's gateway, and once hard-deleted,
    no longer."""
    admin = [("authorization", f"Bearer {token(one, 'admin')}")]
    item = rpb.Item(item_id="followed-1", vector=[1.0] + [0.0] * 63, categories=["Drama"])
    second = recommend_pb2_grpc.RecommendServiceStub(one.gateway_channels()[1])

    def found() -> bool:
        try:
            request = pb.SimilarItemsRequest(item_id=item.item_id, k=5)
            return not second.SimilarItems(request, timeout=2).degraded
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
            return False

    with grpc.insecure_channel(one.envoy_address) as envoy:
        writer = retriever_pb2_grpc.RetrieverServiceStub(envoy)
        assert not found()
        written = time.monotonic()
        writer.UpsertItems(rpb.UpsertItemsRequest(items=[item]), metadata=admin, timeout=30)
        poll_until(found, 10, 0.005, "the item through the second process")
        print(f"upsert to the second process: {time.monotonic() - written:.3f} s")  # (-s)
        hard = rpb.DeleteItemsRequest(item_ids=[item.item_id], mode=rpb.DELETE_MODE_HARD)
        writer.DeleteItems(hard, metadata=admin, timeout=30)
        poll_until(lambda: not found(), 10, 0.005, "the item gone from the second process")
