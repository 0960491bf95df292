"""Unary calls as frames on a held stream (recserve_kit.call_stream), against
the kit's real server: the same answers and statuses as unary calls, the
deadline, a caller that gives up, a server that goes away and comes back."""

import asyncio

import grpc
import pytest

from recserve.features.v1 import features_pb2 as fpb
from recserve.features.v1 import features_pb2_grpc
from recserve_kit.call_stream import CallStream
from recserve_kit.clients import client
from recserve_kit.config import ServiceSettings
from recserve_kit.errors import InvalidArgument, NotFound
from recserve_kit.server import Registration, Service, build_server
from recserve_kit.tracing import TRACEPARENT

SERVICE = "recserve.features.v1.FeatureService"
TRACE = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"


class Features(features_pb2_grpc.FeatureServiceServicer):
    """Test double: answers by user id, slowly for "slow:<ms>", with errors on request."""

    def __init__(self) -> None:
        self.metadata: list[dict[str, str]] = []
        self.time_left: list[float | None] = []
        self.peers: list[str] = []

    async def GetUserFeatures(self, request, context):
        self.metadata.append(dict(context.invocation_metadata()))
        self.time_left.append(context.time_remaining())
        self.peers.append(context.peer())
        user_id = request.user_id
        if user_id == "bad":
            raise InvalidArgument("user_id", "must not be 'bad'")
        if user_id == "gone":
            raise NotFound("user 'gone' is not known")
        if user_id == "boom":
            raise RuntimeError("secret internal detail")
        if user_id.startswith("slow:"):
            await asyncio.sleep(int(user_id[5:]) / 1000)
        return fpb.GetUserFeaturesResponse(user=fpb.UserFeatures(user_id=user_id, found=True))


async def started(name: str) -> tuple[Features, Service, grpc.aio.Channel]:
    """The test servicer on the kit's real server, started, and a channel to it."""
    features = Features()
    settings = ServiceSettings(port=0, shutdown_grace_s=2, shutdown_drain_s=0)
    service = build_server(name, settings, [Registration(features, SERVICE)])
    await service.start()
    return features, service, grpc.aio.insecure_channel(service.address)


@pytest.fixture
async def served():
    features, service, channel = await started("test")
    stream = CallStream(channel)
    stub = client(
        features_pb2_grpc.FeatureServiceStub, channel, SERVICE, stream, ["GetUserFeatures"]
    )
    try:
        yield service, features, stub, channel
    finally:
        stream.close()
        await channel.close()
        await service.stop(0)


def ask(user_id: str) -> fpb.GetUserFeaturesRequest:
    return fpb.GetUserFeaturesRequest(user_id=user_id)


async def test_answers_arrive_each_to_its_caller_in_any_order(served):
    _, features, stub, _ = served
    users = ["slow:60", "slow:30", "a", "slow:10", "b"]
    replies = await asyncio.gather(*(stub.GetUserFeatures(ask(u), timeout=2) for u in users))
    assert [r.user.user_id for r in replies] == users
    # Frames, not a unary call each: every handler ran with a frame's context.
    assert features.peers == ["call-stream"] * len(users)


async def test_a_client_carries_only_the_methods_it_names(served):
    """The named method goes as a frame; any other is the generated stub's
    unary call; the generated stub itself is left as generated."""
    _, features, stub, channel = served
    assert set(stub.carried) == {"GetUserFeatures"}
    assert stub.stub.GetUserFeatures is not stub.GetUserFeatures
    await stub.stub.GetUserFeatures(ask("plain"), timeout=2)
    await stub.GetUserFeatures(ask("framed"), timeout=2)
    assert features.peers[-2] != "call-stream" and features.peers[-1] == "call-stream"
    unary_only = client(features_pb2_grpc.FeatureServiceStub, channel, SERVICE)
    assert not unary_only.carried
    await unary_only.GetUserFeatures(ask("unary"), timeout=2)
    assert features.peers[-1] != "call-stream"


async def test_statuses_are_those_of_unary_calls(served):
    _, _, stub, channel = served
    unary = features_pb2_grpc.FeatureServiceStub(channel)
    for user_id, code in [
        ("bad", grpc.StatusCode.INVALID_ARGUMENT),
        ("gone", grpc.StatusCode.NOT_FOUND),
        ("boom", grpc.StatusCode.INTERNAL),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as framed:
            await stub.GetUserFeatures(ask(user_id), timeout=2)
        with pytest.raises(grpc.aio.AioRpcError) as direct:
            await unary.GetUserFeatures(ask(user_id), timeout=2)
        assert framed.value.code() == direct.value.code() == code
        assert framed.value.details() == direct.value.details()
        assert "secret" not in framed.value.details()


async def test_metadata_and_deadline_reach_the_handler(served):
    _, features, stub, _ = served
    await stub.GetUserFeatures(ask("a"), timeout=0.5, metadata=((TRACEPARENT, TRACE),))
    assert features.metadata[-1] == {TRACEPARENT: TRACE}
    assert 0 < features.time_left[-1] <= 0.5


async def test_a_late_answer_is_deadline_exceeded_and_the_stream_goes_on(served):
    _, _, stub, _ = served
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await stub.GetUserFeatures(ask("slow:300"), timeout=0.05)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert (await stub.GetUserFeatures(ask("a"), timeout=2)).user.user_id == "a"


async def test_a_caller_that_gives_up_costs_the_others_nothing(served):
    _, _, stub, _ = served
    many = [
        asyncio.create_task(stub.GetUserFeatures(ask(f"slow:{n}"), timeout=2)) for n in (50, 80)
    ]
    quitter = asyncio.create_task(stub.GetUserFeatures(ask("slow:40"), timeout=2))
    await asyncio.sleep(0)  # its frame is queued for the writer
    quitter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await quitter
    assert [r.user.user_id for r in await asyncio.gather(*many)] == ["slow:50", "slow:80"]


async def test_unknown_and_malformed_calls_are_refused_plainly(served):
    _, _, _, channel = served
    stream = CallStream(channel)
    try:
        answer = await stream.call(f"/{SERVICE}/NoSuchMethod", b"", 2, ())
        assert answer.code == grpc.StatusCode.UNIMPLEMENTED.value[0]
        answer = await stream.call(f"/{SERVICE}/GetUserFeatures", b"\xff\xff\xff", 2, ())
        assert answer.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "malformed" in answer.details
    finally:
        stream.close()


async def test_a_server_that_goes_away_fails_pending_calls_then_is_used_again():
    features = Features()
    settings = ServiceSettings(port=0, shutdown_grace_s=0.2, shutdown_drain_s=0)
    service = build_server("test", settings, [Registration(features, SERVICE)])
    await service.start()
    port = service.port
    channel = grpc.aio.insecure_channel(service.address)
    stream = CallStream(channel)
    stub = client(
        features_pb2_grpc.FeatureServiceStub, channel, SERVICE, stream, ["GetUserFeatures"]
    )
    try:
        assert (await stub.GetUserFeatures(ask("a"), timeout=2)).user.found
        pending = asyncio.create_task(stub.GetUserFeatures(ask("slow:1500"), timeout=5))
        await asyncio.sleep(0.05)
        await service.stop(0.1)
        with pytest.raises(grpc.aio.AioRpcError) as broken:
            await pending
        assert broken.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        with pytest.raises(grpc.aio.AioRpcError) as down:
            await stub.GetUserFeatures(ask("a"), timeout=1)
        assert down.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        again = ServiceSettings(port=port, shutdown_grace_s=0.2, shutdown_drain_s=0)
        service = build_server("test", again, [Registration(features, SERVICE)])
        await service.start()
        for _ in range(100):
            try:
                reply = await stub.GetUserFeatures(ask("back"), timeout=1)
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.05)
        assert reply.user.user_id == "back"
    finally:
        stream.close()
        await channel.close()
        await service.stop(0)


async def test_a_streaming_method_cannot_go_as_frames(served):
    _, _, _, channel = served
    with pytest.raises(ValueError, match="only unary methods"):
        client(
            features_pb2_grpc.FeatureServiceStub,
            channel,
            SERVICE,
            CallStream(channel),
            ["WatchItemFeatures"],
        )


async def test_calls_spread_over_the_streams_only_when_one_is_busy(served):
    _, _, _, channel = served
    stream = CallStream(channel, streams=3)
    stub = client(
        features_pb2_grpc.FeatureServiceStub, channel, SERVICE, stream, ["GetUserFeatures"]
    )
    try:
        await stub.GetUserFeatures(ask("a"), timeout=2)
        await stub.GetUserFeatures(ask("b"), timeout=2)
        # One at a time: the first stream is idle each time, no other opens.
        assert sum(held is not None for held in stream.calls._held) == 1
        users = [f"slow:{n}" for n in range(20, 60, 5)]
        replies = await asyncio.gather(*(stub.GetUserFeatures(ask(u), timeout=2) for u in users))
        assert [r.user.user_id for r in replies] == users
        assert sum(held is not None for held in stream.calls._held) == 3
    finally:
        stream.close()
