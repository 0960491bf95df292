"""Access control on the running stack: every internal port takes only
the stack's own certificates, admin RPCs check the token inside the service
as well, and Triton's model control answers the ranker's secret alone.

Before: an UpsertItems and a hard DeleteItems on the retriever's port
succeeded with no credentials, and Triton's load/unload was open to any
local process."""

import asyncio
import os
import socket
import urllib.error
import urllib.request

import grpc
import psutil
import pytest
import tritonclient.grpc.aio as triton_aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from recserve.features.v1 import features_pb2 as fpb
from recserve.features.v1 import features_pb2_grpc
from recserve.ranker.v1 import ranker_pb2 as kpb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve.recommend.v1 import events_pb2 as epb
from recserve.recommend.v1 import events_pb2_grpc
from recserve.retriever.v1 import retriever_pb2 as rpb
from recserve.retriever.v1 import retriever_pb2_grpc
from recserve_stack.service_canary import EnvoyAdmin
from tests.helpers import PERMISSION_DENIED, connect_as_nobody

INTERNAL = ("gateway", "features", "retriever", "ranker", "triton_grpc")


@pytest.mark.parametrize("name", INTERNAL)
def test_internal_ports_refuse_callers_without_the_stacks_certificate(stack, name):
    address, options = stack.address(name), stack.channel_options(name)
    request = health_pb2.HealthCheckRequest()
    no_cert = grpc.ssl_channel_credentials(stack.tls.ca)
    for channel in (
        grpc.insecure_channel(address),
        grpc.secure_channel(address, no_cert, options=options),
    ):
        with channel, pytest.raises(grpc.RpcError) as refused:
            health_pb2_grpc.HealthStub(channel).Check(request, timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    with stack.internal_channel(name) as channel:
        # Answered, whatever the status (a component an earlier test
        # restarted may still be NOT_SERVING): the certificate got it in.
        reply = health_pb2_grpc.HealthStub(channel).Check(request, timeout=5)
    assert reply.status in (
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    )


def test_admin_rpcs_on_internal_ports_need_the_admin_token(stack):
    """The issue's reproducer, with a certificate of the stack but no token."""
    forged = (("authorization", "Bearer x.y.z"),)
    with stack.internal_channel("retriever") as channel:
        retriever = retriever_pb2_grpc.RetrieverServiceStub(channel)
        count = retriever.GetInfo(rpb.GetInfoRequest()).point_count
        upsert = rpb.UpsertItemsRequest(
            items=[rpb.Item(item_id="9000000001", vector=[0.1] * 64, categories=["Drama"])]
        )
        hard_delete = rpb.DeleteItemsRequest(item_ids=["1"], mode=rpb.DELETE_MODE_HARD)
        for call, request in (
            (retriever.UpsertItems, upsert),
            (retriever.DeleteItems, hard_delete),
        ):
            for metadata in ((), forged):
                with pytest.raises(grpc.RpcError) as refused:
                    call(request, metadata=metadata, timeout=5)
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert retriever.GetInfo(rpb.GetInfoRequest()).point_count == count
    with stack.internal_channel("features") as channel:
        push = fpb.PushUserEventsRequest(events=[fpb.UserEvent(user_id="42", item_id="1")])
        with pytest.raises(grpc.RpcError) as refused:
            features_pb2_grpc.FeatureServiceStub(channel).PushUserEvents(push, timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with stack.internal_channel("ranker") as channel:
        ranker = ranker_pb2_grpc.RankerServiceStub(channel)
        for call, request in (
            (ranker.LoadModel, kpb.LoadModelRequest(version="anything")),
            (ranker.StartRollout, kpb.StartRolloutRequest(version="anything")),
            (ranker.AbortRollout, kpb.AbortRolloutRequest()),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                call(request, timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_the_events_api_on_the_gateways_port_needs_the_app_token(stack):
    """Past Envoy, the gateway checks the token again: none, a forged one and
    the admin's (another audience) are refused; the app's is let in."""
    auth = stack.data_dir / "auth"
    bearer = {n: f"Bearer {(auth / f'{n}.token').read_text().strip()}" for n in ("admin", "app")}
    event = epb.AppEvent(
        event_id="internal-1", user_id="42", item_id="1", event_type="rating", value=3
    )
    push = epb.PushEventsRequest(events=[event])
    with stack.internal_channel("gateway") as channel:
        events = events_pb2_grpc.EventServiceStub(channel)
        for metadata in (
            (),
            (("authorization", "Bearer x.y.z"),),
            (("authorization", bearer["admin"]),),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                events.PushEvents(push, metadata=metadata, timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        reply = events.PushEvents(push, metadata=(("authorization", bearer["app"]),), timeout=5)
        assert reply.accepted + reply.duplicates == 1


def test_tritons_model_control_answers_only_the_rankers_secret(stack):
    async def check() -> None:
        client = triton_aio.InferenceServerClient(
            stack.address("triton_grpc"),
            creds=stack.tls.channel_credentials(),
            channel_args=stack.channel_options("triton_grpc"),
        )
        try:
            assert await client.is_server_ready()  # inference and health: any stack member
            for control in (
                client.unload_model("ranker"),
                client.load_model("ranker"),
                client.get_model_repository_index(),
            ):
                with pytest.raises(InferenceServerException, match="restricted"):
                    await control
            assert await client.is_model_ready("ranker")  # nothing was unloaded
        finally:
            await client.close()

    asyncio.run(check())
    host, port = stack.address("triton_http").split(":")
    if stack.kind == "local":
        with socket.socket() as probe:  # no HTTP: tritonserver has no TLS there
            assert probe.connect_ex((host, int(port))) != 0
        return
    # Compose's healthcheck reads HTTP (infra/triton/start.sh): health only.
    base = f"http://{host}:{port}/v2"
    with urllib.request.urlopen(f"{base}/health/ready", timeout=5) as ready:
        assert ready.status == 200
    unload = urllib.request.Request(f"{base}/repository/models/ranker/unload", b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(unload, timeout=5)
    assert "restricted" in refused.value.read().decode()


@pytest.mark.local_stack_only
def test_processes_of_one_host_call_each_other_on_sockets_of_the_stacks_user(stack):
    """Envoy and the gateways reach the services over Unix sockets in a
    directory only the stack's user can open; no TCP connection is left
    between them (TCP with mutual TLS stays for tools and other hosts)."""
    sockets = stack.socket_dir
    assert sockets.stat().st_mode & 0o777 == 0o700 and sockets.stat().st_uid == os.getuid()
    expected = {
        f"{name}.sock" for name in ("gateway", "gateway-2", "features", "retriever", "ranker")
    }
    assert expected <= {path.name for path in sockets.iterdir()}
    admin = EnvoyAdmin(f"http://127.0.0.1:{stack.port('envoy_admin')}")
    assert set(admin.cluster_hosts("gateway")) == {
        str(sockets / "gateway.sock"),
        str(sockets / "gateway-2.sock"),
    }
    service_ports = {stack.port(name) for name in ("features", "retriever", "ranker")}
    for pid in stack.gateway_pids():
        tcp = psutil.Process(pid).net_connections(kind="tcp")
        assert not [c for c in tcp if c.raddr and c.raddr.port in service_ports], tcp
    if os.getuid() == 0:
        # Another user of the machine cannot even open the sockets.
        assert connect_as_nobody(sockets / "gateway.sock") == PERMISSION_DENIED
