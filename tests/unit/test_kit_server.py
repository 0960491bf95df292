"""The kit's server: health transitions, graceful shutdown, error mapping."""

import asyncio
import contextlib

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from recserve.features.v1 import features_pb2, features_pb2_grpc
from recserve_kit.config import ServiceSettings
from recserve_kit.errors import InvalidArgument
from recserve_kit.health import DependencyProbe
from recserve_kit.server import Registration, build_server

SERVICE = "recserve.features.v1.FeatureService"


class SlowFeatures(features_pb2_grpc.FeatureServiceServicer):
    """Test double: a servicer whose calls take a while, or fail on purpose."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def GetUserFeatures(self, request, context):
        if request.user_id == "bad":
            raise InvalidArgument("user_id", "must not be 'bad'")
        if request.user_id == "boom":
            raise RuntimeError("secret internal detail")
        self.entered.set()
        await asyncio.sleep(0.5)
        return features_pb2.GetUserFeaturesResponse(
            user=features_pb2.UserFeatures(user_id=request.user_id, found=True)
        )


async def status(channel, service=""):
    reply = await health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=service), timeout=2
    )
    return reply.status


async def wait_status(channel, wanted, service=""):
    for _ in range(200):
        if await status(channel, service) == wanted:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{service!r} never became {wanted}")


@pytest.fixture
def settings():
    return ServiceSettings(port=0, shutdown_grace_s=5, shutdown_drain_s=0.3)


@contextlib.asynccontextmanager
async def probed(settings, probe: DependencyProbe):
    """A started server whose health follows ``probe``; a channel to it."""
    service = build_server(
        "test", settings, [Registration(SlowFeatures(), SERVICE)], probes=[probe]
    )
    await service.start()
    try:
        async with grpc.aio.insecure_channel(service.address) as channel:
            yield channel
    finally:
        await service.stop(0)


async def test_health_follows_dependency_probes(settings):
    dependency_up = {"ok": False}

    async def check() -> bool:
        return dependency_up["ok"]

    async with probed(settings, DependencyProbe("store", check, interval_s=0.02)) as channel:
        assert await status(channel) == health_pb2.HealthCheckResponse.NOT_SERVING
        assert await status(channel, SERVICE) == health_pb2.HealthCheckResponse.NOT_SERVING
        dependency_up["ok"] = True
        await wait_status(channel, health_pb2.HealthCheckResponse.SERVING)
        await wait_status(channel, health_pb2.HealthCheckResponse.SERVING, SERVICE)
        await wait_status(channel, health_pb2.HealthCheckResponse.SERVING, "dependency/store")
        dependency_up["ok"] = False
        await wait_status(channel, health_pb2.HealthCheckResponse.NOT_SERVING)
        await wait_status(channel, health_pb2.HealthCheckResponse.NOT_SERVING, "dependency/store")


async def test_a_failing_dependency_is_looked_at_again_before_its_interval(settings):
    """A process waiting on a dependency (the ranker on Triton at start) is
    ready soon after it, not a whole interval later."""
    looks = []

    async def check() -> bool:
        looks.append(1)
        return len(looks) >= 3

    async with probed(settings, DependencyProbe("store", check, interval_s=600)) as channel:
        await wait_status(channel, health_pb2.HealthCheckResponse.SERVING)
    assert len(looks) == 3


async def test_graceful_shutdown_finishes_in_flight_call(settings):
    servicer = SlowFeatures()
    service = build_server(
        "test",
        settings,
        [Registration(servicer, SERVICE)],
    )
    await service.start()
    async with grpc.aio.insecure_channel(service.address) as channel:
        await wait_status(channel, health_pb2.HealthCheckResponse.SERVING)
        stub = features_pb2_grpc.FeatureServiceStub(channel)
        in_flight = asyncio.ensure_future(
            stub.GetUserFeatures(features_pb2.GetUserFeaturesRequest(user_id="7"), timeout=5)
        )
        await servicer.entered.wait()
        stopping = asyncio.create_task(service.stop())
        # Health flips first, while the call is still running.
        await wait_status(channel, health_pb2.HealthCheckResponse.NOT_SERVING)
        assert not in_flight.done()
        reply = await in_flight
        assert reply.user.user_id == "7" and reply.user.found
        await stopping


async def test_domain_errors_map_to_status_without_leaking_text(settings):
    service = build_server(
        "test",
        settings,
        [Registration(SlowFeatures(), SERVICE)],
    )
    await service.start()
    try:
        async with grpc.aio.insecure_channel(service.address) as channel:
            stub = features_pb2_grpc.FeatureServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                await stub.GetUserFeatures(features_pb2.GetUserFeaturesRequest(user_id="bad"))
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert bad.value.details().startswith("user_id:")
            with pytest.raises(grpc.aio.AioRpcError) as boom:
                await stub.GetUserFeatures(features_pb2.GetUserFeaturesRequest(user_id="boom"))
            assert boom.value.code() == grpc.StatusCode.INTERNAL
            assert "secret" not in boom.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as unbuilt:
                await stub.PushUserEvents(features_pb2.PushUserEventsRequest())
            assert unbuilt.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await service.stop(0)


async def test_a_malformed_body_is_invalid_argument_not_unknown(settings, caplog):
    """Bytes that are not the request message get a plain
    INVALID_ARGUMENT, not UNKNOWN with a class name and a traceback per call."""
    service = build_server("test", settings, [Registration(SlowFeatures(), SERVICE)])
    await service.start()
    try:
        async with grpc.aio.insecure_channel(service.address) as channel:
            raw = channel.unary_unary(
                f"/{SERVICE}/GetUserFeatures",
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )
            with caplog.at_level("ERROR"), pytest.raises(grpc.aio.AioRpcError) as bad:
                await raw(bytes.fromhex("0a 02 ff fe"), timeout=2)  # user_id: not UTF-8
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert bad.value.details().startswith("request: not a valid")
            assert "class" not in bad.value.details()
            assert not [r for r in caplog.records if r.levelname == "ERROR"]
    finally:
        await service.stop(0)


def test_server_faults_are_logged_within_a_budget():
    """A request that fails inside a service logs its traceback; a flood of
    them logs a few a second and counts the rest, so a flood cannot fill the logs."""
    from recserve_kit.rpc import LogBudget

    now = [0.0]
    budget = LogBudget(per_second=5, clock=lambda: now[0])
    taken = [budget.take() for _ in range(50)]  # one instant
    assert taken[:5] == [0] * 5 and taken[5:] == [None] * 45
    now[0] += 1.0
    assert budget.take() == 45  # the next line says how many were dropped
    assert budget.take() == 0


async def test_a_background_loop_that_raises_runs_again(caplog):
    """A judge or reloader that fails once keeps running (logged), and one
    that returns is not started again."""
    from recserve_kit.server import supervised

    runs: list[int] = []

    async def flaky() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise OSError("a file half written")

    await asyncio.wait_for(supervised(flaky, pause_s=0.01), timeout=5)
    assert runs == [0, 1, 2]
    assert caplog.text.count("failed; restarting it") == 2
