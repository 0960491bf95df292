"""One way to build and run a recserve gRPC service.

``build_server`` returns an unstarted ``Service`` (tests start it on a free
port in-process); ``serve`` runs it until SIGTERM/SIGINT, then goes
NOT_SERVING, lets in-flight calls finish within the grace period, runs the
service's own cleanups and flushes telemetry, in that order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import Histogram

from recserve_kit.config import ServiceSettings
from recserve_kit.errors import RecserveError
from recserve_kit.health import DependencyProbe, HealthStatus
from recserve_kit.logs import setup_logging
from recserve_kit.telemetry import Telemetry, setup_telemetry

log = logging.getLogger(__name__)

RPC_DURATION = Histogram(
    "recserve_rpc_server_duration_seconds",
    "Server-side duration of unary RPCs.",
    ["service", "method", "code"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.2, 0.5, 1.0, 5.0),
)


@dataclass(frozen=True)
class Registration:
    """A servicer and the generated function that adds it to a server."""

    add_to_server: Callable[[Any, grpc.aio.Server], None]
    servicer: Any
    full_name: str  # e.g. "recserve.ranker.v1.RankerService"


Cleanup = Callable[[], Awaitable[None]]


@dataclass
class Service:
    name: str
    settings: ServiceSettings
    server: grpc.aio.Server
    health: HealthStatus
    port: int
    probes: Sequence[DependencyProbe] = ()
    cleanups: list[Cleanup] = field(default_factory=list)
    on_start: list[Cleanup] = field(default_factory=list)
    # The service's domain object, for in-process tests and wiring.
    domain: Any = None
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def run_in_background(self, loop: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Runs ``loop`` from start until shutdown (watchers, reloaders)."""
        self.background.append(loop)

    @property
    def address(self) -> str:
        return f"{self.settings.host}:{self.port}"

    async def start(self) -> None:
        await self.server.start()
        for hook in self.on_start:
            await hook()
        self._tasks = [asyncio.create_task(loop()) for loop in self.background]
        await self.health.mark_started()
        self.health.start_probes(self.probes)
        log.info("serving", extra={"fields": {"address": self.address}})

    async def stop(self, grace_s: float | None = None) -> None:
        """NOT_SERVING, drain, then let in-flight calls finish, then clean up."""
        await self.health.enter_shutdown()
        if grace_s is None and self.settings.shutdown_drain_s:
            await asyncio.sleep(self.settings.shutdown_drain_s)
        await self.server.stop(self.settings.shutdown_grace_s if grace_s is None else grace_s)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for cleanup in self.cleanups:
            await cleanup()


class ErrorMappingInterceptor(grpc.aio.ServerInterceptor):
    """Maps domain errors to statuses and records RPC latency by method and code."""

    def __init__(self, service: str) -> None:
        self.service = service

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary
        method = handler_call_details.method.rsplit("/", 1)[-1]

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            try:
                return await inner(request, context)
            except RecserveError as exc:
                code = exc.code
                await context.abort(exc.code, exc.message)
            except NotImplementedError:
                code = grpc.StatusCode.UNIMPLEMENTED
                await context.abort(code, f"{method} is not implemented yet")
            except (asyncio.CancelledError, grpc.aio.AbortError):
                code = context.code() or grpc.StatusCode.CANCELLED
                raise
            except Exception:
                code = grpc.StatusCode.INTERNAL
                log.exception("unhandled error in %s", method)
                await context.abort(code, "internal error; see the server log for this trace id")
            finally:
                RPC_DURATION.labels(self.service, method, code.name).observe(
                    time.perf_counter() - started
                )

        return grpc.unary_unary_rpc_method_handler(
            unary,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def build_server(
    name: str,
    settings: ServiceSettings,
    registrations: Sequence[Registration],
    probes: Sequence[DependencyProbe] = (),
    options: Sequence[tuple[str, Any]] = (),
) -> Service:
    """An unstarted server with health, reflection and error mapping."""
    server = grpc.aio.server(
        interceptors=[ErrorMappingInterceptor(name)],
        options=[("grpc.so_reuseport", 0), *options],
    )
    for registration in registrations:
        registration.add_to_server(registration.servicer, server)
    names = [r.full_name for r in registrations]
    health_status = HealthStatus(
        names,
        [p.name for p in probes if p.required],
        [p.name for p in probes if not p.required],
    )
    health_pb2_grpc.add_HealthServicer_to_server(health_status.servicer, server)
    reflection.enable_server_reflection(
        [
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    port = server.add_insecure_port(f"{settings.host}:{settings.port}")
    if port == 0:
        raise OSError(f"{name}: cannot bind {settings.host}:{settings.port}")
    return Service(name, settings, server, health_status, port, probes)


def init_process(name: str, settings: ServiceSettings) -> Telemetry:
    """Logging and telemetry for a service process; call before build_server."""
    setup_logging(name, settings.log_level)
    return setup_telemetry(name, settings.data_dir, settings.metrics_port, settings.metrics_host)


async def serve(service: Service, telemetry: Telemetry | None = None) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await service.start()
    await stop.wait()
    log.info("shutting down", extra={"fields": {"grace_s": service.settings.shutdown_grace_s}})
    await service.stop()
    if telemetry is not None:
        telemetry.shutdown()
    log.info("stopped")


def run(factory: Callable[[], Awaitable[tuple[Service, Telemetry]]]) -> None:
    """Entry point for a service's ``__main__``."""

    async def main() -> None:
        service, telemetry = await factory()
        await serve(service, telemetry)

    asyncio.run(main())
