"""Readiness checks the runner (and tests) use: gRPC health and HTTP 200."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from recserve_kit import transport
from recserve_kit.transport import Tls


async def grpc_serving(
    address: str, service: str = "", timeout_s: float = 1.0, tls: Tls | None = None
) -> bool:
    async with transport.aio_channel(address, tls) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s
            )
        except grpc.aio.AioRpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def _http_ok(url: str, timeout_s: float) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


async def http_ok(url: str, timeout_s: float = 1.0) -> bool:
    return await asyncio.to_thread(_http_ok, url, timeout_s)


def wait_until(
    condition: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.2
) -> None:
    """Polls ``condition`` until it holds; TimeoutError naming ``what`` after the timeout."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached after {timeout_s:.0f}s")
        time.sleep(interval_s)
