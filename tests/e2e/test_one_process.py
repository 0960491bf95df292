"""The request path in one process (``RECSERVE_STACK_ONE_PROCESS``, the local
runner's default on a small host): the gateway's process hosts the features,
retriever and ranker modules, each still on its own port, and a Recommend's
calls to them stay in the process with their spans and metrics. The rest of
the e2e suite runs against it with RECSERVE_E2E_ONE_PROCESS=true; this module
starts such a stack of its own when the suite runs the backends apart."""

from __future__ import annotations

import asyncio
import re
import threading

import grpc
import pytest

from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc
from recserve_stack.probes import grpc_serving
from tests.e2e.conftest import ONE_PROCESS
from tests.helpers import data_dir_with_artifacts, full_answer, poll_until
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
    the duration metric its handler wrapper observes."""
    pattern = (
        r"recserve_rpc_server_duration_seconds_count\{"
        rf'code="OK",method="{method}",service="{service}"\}} (\S+)'
    )
    found = re.search(pattern, metrics)
    return float(found.group(1)) if found else 0.0


def serving(stack, name: str) -> bool:
    """Whether ``name``'s port answers SERVING (the runner's own probe)."""
    return asyncio.run(grpc_serving(stack.address(name), timeout_s=5, tls=stack.tls))


def test_one_process_hosts_the_backends_and_each_keeps_its_port(one):
    assert len(one.component_pids("services.one_process")) == 1
    for name in HOSTED:
        assert one.component_pids(f"services.{name}") == [], name
        assert serving(one, name), name


def test_a_recommend_runs_each_module_in_the_gateways_process(one, door):
    full_answer(door, "42")
    before = one.metrics("gateway")
    reply = full_answer(door, "43", debug=True)
    after = one.metrics("gateway")
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
    """SIGKILL of the process that hosts the backends, under load: the other
    gateway answers meanwhile (from the fallback while the backends are
    away), the runner restarts the process, and full answers return."""
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
    before = one.component_pid("services.one_process")
    worker = threading.Thread(target=load)
    worker.start()
    try:
        one.kill("services.one_process")

        def restarted() -> bool:
            pids = one.component_pids("services.one_process")
            return bool(pids) and before not in pids

        poll_until(restarted, 60, 0.2, "the runner to restart the one process")
        poll_until(
            lambda: not door.Recommend(pb.RecommendRequest(user_id="8", k=10), timeout=2).degraded,
            120, 0.2, "a full answer from the restarted process",
        )  # fmt: skip
    finally:
        stop.set()
        worker.join()
    assert errors == [] and answered and all(answered)
