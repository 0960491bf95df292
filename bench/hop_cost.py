"""The CPU floor of one hop: what a call costs when it does no work.

Against a running stack: a gRPC health check on a service (the kit's server
with its interceptors, as every RPC of ours pays) and a one-row inference
of the user tower through Triton's python backend (the cheapest model call
the ranker makes). CPU of the server side (psutil) and of this process as
the client, divided by the calls. Recommend makes four service calls and
two Triton calls, so these floors bound what any amount of work inside the
services could save.

Beside them, the same call of the features service (``GetItemFeatures`` of
no items) as a unary call and as a frame on a held stream
(``recserve_kit.call_stream``, what the gateway sends). ``pace_ms`` runs
one call at a time with that pause between calls, as the stack sees them at
its rates; 0 runs 8 at a time back to back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np
import psutil
import tritonclient.grpc.aio as triton_aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import InferInput

from bench.cpu_profile import cpu_seconds, stack_processes
from recserve.features.v1 import features_pb2 as fpb
from recserve.features.v1 import features_pb2_grpc
from recserve_kit import transport
from recserve_kit.call_stream import CallStream
from recserve_kit.clients import client
from recserve_kit.transport import Tls
from recserve_model.encoding import HISTORY_LEN

CONCURRENCY = 8
SERVICE_CALLS_PER_RECOMMEND = 4  # user features, embed, search, score
TRITON_CALLS_PER_RECOMMEND = 2  # user tower, ranker


async def _measure(
    call: Callable[[int], Awaitable[object]],
    servers: list[psutil.Process],
    calls: int,
    pace_ms: float = 0.0,
) -> dict[str, float]:
    for i in range(100):  # warm the channel and the server's code paths
        await call(i)
    me = [psutil.Process()]
    server_before, client_before = cpu_seconds(servers), cpu_seconds(me)
    gate = asyncio.Semaphore(1 if pace_ms else CONCURRENCY)

    async def one(i: int) -> None:
        async with gate:
            await call(i)
            if pace_ms:
                await asyncio.sleep(pace_ms / 1000)

    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.gather(*(one(i) for i in range(calls)))
    elapsed = loop.time() - started
    server_us = 1e6 * (cpu_seconds(servers) - server_before) / calls
    client_us = 1e6 * (cpu_seconds(me) - client_before) / calls
    return {
        "server_us": round(server_us),
        "client_us": round(client_us),
        "total_us": round(server_us + client_us),
        "calls_per_s": round(calls / elapsed),
    }


async def service_hop(
    address: str, servers: list[psutil.Process], calls: int, tls: Tls | None
) -> dict[str, float]:
    async with transport.aio_channel(address, tls) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="")
        return await _measure(lambda _: health.Check(request, timeout=2), servers, calls)


async def framed_or_unary(
    address: str, servers: list[psutil.Process], calls: int, tls: Tls | None, pace_ms: float
) -> dict[str, dict[str, float]]:
    """GetItemFeatures of no items, unary and as a frame, on one channel."""
    service = "recserve.features.v1.FeatureService"
    request = fpb.GetItemFeaturesRequest()
    async with transport.aio_channel(address, tls) as channel:
        unary = features_pb2_grpc.FeatureServiceStub(channel)
        stream = CallStream(channel)
        framed = client(
            features_pb2_grpc.FeatureServiceStub, channel, service, stream, ["GetItemFeatures"]
        )
        try:
            return {
                name: await _measure(
                    lambda _, stub=stub: stub.GetItemFeatures(request, timeout=2),
                    servers,
                    calls,
                    pace_ms,
                )
                for name, stub in (("unary", unary), ("frame", framed))
            }
        finally:
            stream.close()


async def triton_hop(
    url: str, user_dim: int, servers: list[psutil.Process], calls: int, tls: Tls | None
) -> dict[str, float]:
    inputs = [
        InferInput("user_features", [1, user_dim], "FP32"),
        InferInput("history", [1, HISTORY_LEN], "INT64"),
    ]
    inputs[0].set_data_from_numpy(np.zeros((1, user_dim), np.float32))
    inputs[1].set_data_from_numpy(np.zeros((1, HISTORY_LEN), np.int64))
    creds = tls.channel_credentials() if tls else None
    async with triton_aio.InferenceServerClient(url, creds=creds) as client:
        return await _measure(lambda _: client.infer("user_tower", inputs), servers, calls)


def run(
    service_address: str,
    service: str,
    triton_url: str,
    user_dim: int,
    calls: int,
    tls: Tls | None = None,
    pace_ms: float = 0.0,
) -> dict[str, object]:
    """``tls``: the operator's certificate when the stack runs mutual TLS."""
    processes = stack_processes()
    if not processes.get(service) or not processes.get("tritonserver"):
        raise SystemExit(f"{service} and Triton must be running (start the stack first)")
    hop = asyncio.run(service_hop(service_address, processes[service], calls, tls))
    features = asyncio.run(
        framed_or_unary(service_address, processes[service], calls, tls, pace_ms)
    )
    triton = asyncio.run(
        triton_hop(
            triton_url,
            user_dim,
            processes["tritonserver"] + processes["triton python stubs"],
            calls,
            tls,
        )
    )
    floor_ms = (
        SERVICE_CALLS_PER_RECOMMEND * hop["total_us"]
        + TRITON_CALLS_PER_RECOMMEND * triton["total_us"]
    ) / 1000
    return {
        "calls": calls,
        "concurrency": CONCURRENCY,
        "pace_ms": pace_ms,
        "transport": "mutual TLS" if tls else "plaintext",
        "service_hop": {"service": service, **hop},
        "features_unary": features["unary"],
        "features_frame": features["frame"],
        "triton_hop": triton,
        "floor_cpu_ms_per_recommend": round(floor_ms, 2),
    }
