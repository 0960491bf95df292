"""Calls to a service hosted in the caller's process (recserve_kit.local_calls),
against the kit's real server: the same answers and statuses as a gRPC call
to the same server, the deadline, the caller's metadata, and the message
itself handed over (no serialisation)."""

import asyncio

import grpc
import pytest
from prometheus_client import REGISTRY

from recserve.features.v1 import features_pb2 as fpb
from recserve.features.v1 import features_pb2_grpc
from recserve_kit.clients import client
from recserve_kit.local_calls import LocalCalls
from recserve_kit.tracing import TRACEPARENT
from tests.helpers import apoll_until
from tests.unit.test_call_stream import SERVICE, TRACE, ask, started


@pytest.fixture
async def hosted():
    features, service, channel = await started("local-test")
    assert service.frames is not None
    local = client(
        features_pb2_grpc.FeatureServiceStub,
        channel,
        SERVICE,
        LocalCalls(service.frames.handlers),
        ["GetUserFeatures"],
    )
    try:
        yield features, local, features_pb2_grpc.FeatureServiceStub(channel)
    finally:
        await channel.close()
        await service.stop(0)


def calls_counted(code: str) -> float:
    value = REGISTRY.get_sample_value(
        "recserve_rpc_server_duration_seconds_count",
        {"service": "local-test", "method": "GetUserFeatures", "code": code},
    )
    return value or 0.0


async def test_the_handler_runs_in_this_process_with_the_callers_metadata(hosted):
    features, local, _ = hosted
    before = calls_counted("OK")
    reply = await local.GetUserFeatures(ask("a"), timeout=2, metadata=((TRACEPARENT, TRACE),))
    assert reply.user.user_id == "a" and reply.user.found
    assert features.metadata[-1][TRACEPARENT] == TRACE
    assert 0 < features.time_left[-1] <= 2
    # The kit's wrapper ran: the call is in the service's duration metric.
    assert calls_counted("OK") == before + 1


async def test_statuses_are_those_of_a_grpc_call(hosted):
    _, local, remote = hosted
    for user_id in ("bad", "gone", "boom"):
        with pytest.raises(grpc.aio.AioRpcError) as over_grpc:
            await remote.GetUserFeatures(ask(user_id), timeout=2)
        with pytest.raises(grpc.aio.AioRpcError) as in_process:
            await local.GetUserFeatures(ask(user_id), timeout=2)
        assert in_process.value.code() == over_grpc.value.code()
        assert in_process.value.details() == over_grpc.value.details()
    assert in_process.value.code() == grpc.StatusCode.INTERNAL
    assert "secret" not in in_process.value.details()


async def test_a_late_handler_is_deadline_exceeded_and_cancelled(hosted):
    _, local, _ = hosted
    before = calls_counted("CANCELLED")
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await local.GetUserFeatures(ask("slow:500"), timeout=0.05)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # Cancelled where it waited, as a server cancels a call past its deadline.
    assert calls_counted("CANCELLED") == before + 1
    reply = await local.GetUserFeatures(ask("after"), timeout=2)
    assert reply.user.user_id == "after"


async def test_concurrent_calls_each_get_their_own_answer(hosted):
    _, local, _ = hosted
    users = ["slow:40", "slow:20", "a", "slow:5"]
    replies = await asyncio.gather(*(local.GetUserFeatures(ask(u), timeout=2) for u in users))
    assert [r.user.user_id for r in replies] == users


def test_an_unknown_method_is_named():
    with pytest.raises(ValueError, match=r"/x\.Y/Z: no such unary method"):
        LocalCalls({}).unary("/x.Y/Z", fpb.GetUserFeaturesResponse)


async def called_then_loop_held(features, call, past_s: float):
    """``call`` started and waiting on its handler's own await, then the
    loop held by other requests' work until ``past_s`` after it began."""
    entered = len(features.time_left)
    task = asyncio.create_task(call)
    await apoll_until(lambda: asyncio.sleep(0, len(features.time_left) > entered), 5, 0)
    loop = asyncio.get_running_loop()
    busy_until = loop.time() + past_s
    while loop.time() < busy_until:  # CPU work, not a wait: nothing else runs
        pass
    return task


async def test_an_answer_ready_in_time_is_not_lost_to_a_busy_loop(hosted):
    features, local, _ = hosted
    # Its answer is ready after 20 ms; the loop comes back after 100.
    call = local.GetUserFeatures(ask("slow:20"), timeout=0.05)
    reply = await (await called_then_loop_held(features, call, 0.1))
    assert reply.user.user_id == "slow:20", "over gRPC, an answer in time is kept"
    # Given back once only: a handler that is late for real still times out.
    late = local.GetUserFeatures(ask("slow:500"), timeout=0.05)
    with pytest.raises(grpc.aio.AioRpcError) as expired:
        await (await called_then_loop_held(features, late, 0.1))
    assert expired.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
