"""Keepalive that both ends agree on: a client that pings while idle (as
every channel of the stack does) keeps its connection to a server the kit
builds, where gRPC's default server answers with GOAWAY too_many_pings and
the next call pays a reconnect."""

import asyncio
from collections.abc import Awaitable, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from recserve_kit.config import ServiceSettings
from recserve_kit.server import build_server
from recserve_kit.transport import CLIENT_KEEPALIVE

# The stack's client options, pinging every 0.5 s so the test idles briefly.
FAST_PINGS = [*dict(CLIENT_KEEPALIVE, **{"grpc.keepalive_time_ms": 500}).items()]
Start = Callable[[], Awaitable[tuple[str, Callable[[], Awaitable[None]]]]]


# gRPC's default server cuts such a client 3.0 s into its idle spell
# (GOAWAY too_many_pings at 3.01 s, run after run); a 3 s spell sampled
# the boundary and passed or not with the host's speed, so watch twice it.
IDLE_S = 6.0


async def states_while_idle(start: Start, idle_s: float = IDLE_S) -> list[str]:
    """The client channel's state every 0.25 s of an idle spell after one call."""
    address, stop = await start()
    channel = grpc.aio.insecure_channel(address, options=FAST_PINGS)
    try:
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        states = []
        for _ in range(int(idle_s / 0.25)):
            await asyncio.sleep(0.25)  # idling is the point: pings, no calls
            states.append(channel.get_state().name)
        return states
    finally:
        await channel.close()
        await stop()


async def kit_server() -> tuple[str, Callable[[], Awaitable[None]]]:
    service = build_server("test", ServiceSettings(port=0, shutdown_drain_s=0), [])
    await service.start()
    return service.address, lambda: service.stop(0)


async def default_server() -> tuple[str, Callable[[], Awaitable[None]]]:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return f"127.0.0.1:{port}", lambda: server.stop(0)


async def test_an_idle_pinging_client_keeps_its_connection_to_our_servers():
    assert set(await states_while_idle(kit_server)) == {"READY"}


async def test_grpcs_default_server_would_cut_it():
    # The fault the shared options prevent, shown on gRPC's defaults.
    assert "IDLE" in await states_while_idle(default_server)
