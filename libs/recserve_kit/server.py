"""One way to build and run a recserve gRPC service.

``build_server`` returns an unstarted ``Service`` (tests start it on a free
port in-process); ``serve`` runs it until SIGTERM/SIGINT, then goes
NOT_SERVING, lets in-flight calls finish within the grace period, runs the
service's own cleanups and flushes telemetry, in that order.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import uvloop
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from recserve_kit import call_stream, transport
from recserve_kit.admin import APP_AUDIENCE, AUDIENCE, AdminTokens
from recserve_kit.config import ServiceSettings
from recserve_kit.health import DependencyProbe, HealthStatus
from recserve_kit.logs import setup_logging
from recserve_kit.rpc import RPC_DURATION, method_handlers  # noqa: F401  (re-exported)
from recserve_kit.telemetry import Telemetry, setup_telemetry

log = logging.getLogger(__name__)
BACKGROUND_RESTART_S = 1.0  # a failed background loop waits this long before it runs again


@dataclass(frozen=True)
class Registration:
    """A servicer and the full name of the proto service it implements."""

    servicer: Any
    full_name: str  # e.g. "recserve.ranker.v1.RankerService"
    # Methods that change state: they verify the admin token in the service.
    admin_methods: frozenset[str] = frozenset()
    # Methods app backends call with their own token (audience recserve-app);
    # one in both sets takes either token.
    app_methods: frozenset[str] = frozenset()


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
    # Run once the drain is over, before the server stops: long-lived streams
    # end here, so the grace period does not have to cancel them.
    on_stop: list[Cleanup] = field(default_factory=list)
    # Serves the unary methods as frames on held streams; ended at stop.
    frames: call_stream.CallStreamServicer | None = None
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
        self._tasks = [asyncio.create_task(supervised(loop)) for loop in self.background]
        await self.health.mark_started()
        self.health.start_probes(self.probes)
        security = "mutual TLS" if self.settings.tls_dir else "plaintext (loopback only)"
        fields = {"address": self.address, "transport": security}
        if self.settings.socket:
            fields["socket"] = str(self.settings.socket)
        log.info("serving", extra={"fields": fields})

    async def stop(self, grace_s: float | None = None) -> None:
        """NOT_SERVING, drain, then let in-flight calls finish, then clean up."""
        await self.health.enter_shutdown()
        if grace_s is None and self.settings.shutdown_drain_s:
            await asyncio.sleep(self.settings.shutdown_drain_s)
        for hook in self.on_stop:
            await hook()
        grace = self.settings.shutdown_grace_s if grace_s is None else grace_s
        if self.frames is not None:
            await self.frames.close(grace)
        await self.server.stop(self.settings.shutdown_grace_s if grace_s is None else grace_s)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for cleanup in self.cleanups:
            await cleanup()


async def supervised(
    loop: Callable[[], Coroutine[Any, Any, None]], pause_s: float = BACKGROUND_RESTART_S
) -> None:
    """Runs ``loop`` again after it raises: a judge or a reloader that failed
    once (a file half written, a backend down) must not stop for good while
    the process goes on serving as if it ran."""
    while True:
        try:
            await loop()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("background loop %s failed; restarting it", loop.__qualname__)
            await asyncio.sleep(pause_s)


def _add_servicers(
    server: grpc.aio.Server,
    settings: ServiceSettings,
    registrations: Sequence[Registration],
    name: str,
) -> dict[str, call_stream.UnaryHandler]:
    """Each servicer's methods, wrapped once (errors, span, metric, tokens);
    returns the unary ones by full method name, for the call stream."""
    tokens = AdminTokens(settings.admin_jwks) if settings.admin_jwks else None
    app_tokens = either = None
    if settings.admin_jwks:
        app_tokens = AdminTokens(settings.admin_jwks, APP_AUDIENCE, "app call")
        either = AdminTokens(settings.admin_jwks, [AUDIENCE, APP_AUDIENCE], "admin or app call")
    unary: dict[str, call_stream.UnaryHandler] = {}
    for registration in registrations:
        handlers = method_handlers(
            registration.servicer,
            registration.full_name,
            name,
            {
                **dict.fromkeys(registration.admin_methods, tokens),
                **dict.fromkeys(registration.app_methods, app_tokens),
                # In both sets: either token.
                **dict.fromkeys(registration.admin_methods & registration.app_methods, either),
            },
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(registration.full_name, handlers),)
        )
        server.add_registered_method_handlers(registration.full_name, handlers)
        for method, handler in handlers.items():
            if handler.unary_unary is not None:
                unary[f"/{registration.full_name}/{method}"] = call_stream.UnaryHandler(
                    handler.unary_unary, handler.request_deserializer, handler.response_serializer
                )
    return unary


def build_server(
    name: str,
    settings: ServiceSettings,
    registrations: Sequence[Registration],
    probes: Sequence[DependencyProbe] = (),
    options: Sequence[tuple[str, Any]] = (),
) -> Service:
    """An unstarted server with health, reflection, error mapping, spans and metrics."""
    server = grpc.aio.server(
        options=[("grpc.so_reuseport", 0), *transport.SERVER_KEEPALIVE, *options]
    )
    # Our servicers get one wrapper per method (errors, span, metric);
    # health and reflection stay bare: probes need no span. The same unary
    # methods are served as frames on held streams too (the stack's callers).
    frames = call_stream.CallStreamServicer(_add_servicers(server, settings, registrations, name))
    server.add_generic_rpc_handlers((call_stream.stream_handler(frames),))
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
            call_stream.SERVICE,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    port = transport.bind(server, f"{settings.host}:{settings.port}", settings.tls(name))
    if port == 0:
        raise OSError(f"{name}: cannot bind {settings.host}:{settings.port}")
    # Same-host callers: the file system decides who connects, no TLS.
    if settings.socket and not transport.bind(
        server, transport.unix_listener(settings.socket), None
    ):
        raise OSError(f"{name}: cannot listen on {settings.socket}")
    return Service(name, settings, server, health_status, port, probes, frames=frames)


def init_process(name: str, settings: ServiceSettings, hosted: Sequence[str] = ()) -> Telemetry:
    """Logging and telemetry for a service process (and the services it
    hosts beside its own, each tracing under its own name); call before
    build_server."""
    setup_logging(name, settings.log_level)
    return setup_telemetry(
        name, settings.data_dir, settings.metrics_port, settings.metrics_host, hosted
    )


async def serve(services: Service | Sequence[Service], telemetry: Telemetry | None = None) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully. Several
    services in one process (``services.one_process``) start in the order
    given, backends first, and stop the other way round: the first to stop
    drains its callers; the rest have no callers left but in-process ones."""
    together = [services] if isinstance(services, Service) else list(services)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    for service in together:
        await service.start()
    freeze_startup_heap()
    await stop.wait()
    first = together[-1]
    log.info("shutting down", extra={"fields": {"grace_s": first.settings.shutdown_grace_s}})
    await first.stop()
    for service in reversed(together[:-1]):
        await service.stop(service.settings.shutdown_grace_s)
    if telemetry is not None:
        telemetry.shutdown()
    log.info("stopped")


def freeze_startup_heap() -> None:
    """Moves every object alive once the process serves out of the garbage
    collector's reach (``gc.freeze``, as Instagram did for its servers): what
    a service loads at start (catalogue, model tables, Feast's registry,
    protobuf descriptors) lives as long as the process, yet each full
    collection walked all of it, a stall of the event loop of 150 ms in the
    request-path process at 200/s, seen as stage timeouts and sheds
    (docs/benchmarks.md, "The collector's pauses"). Frozen objects are still
    freed by reference counting once dropped; only a cycle among them stays."""
    gc.collect()
    gc.freeze()
    log.info("startup heap frozen", extra={"fields": {"objects": gc.get_freeze_count()}})


Served = tuple[Service | Sequence[Service], Telemetry]


def run(factory: Callable[[], Awaitable[Served]]) -> None:
    """Entry point for a service's ``__main__``."""

    async def main() -> None:
        services, telemetry = await factory()
        await serve(services, telemetry)

    # uvloop: 7-9% less CPU per Recommend across the stack than asyncio's own
    # loop, with grpc.aio unchanged (docs/benchmarks.md, "A lean hot path").
    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        close_loop(loop)


def close_loop(loop: asyncio.AbstractEventLoop, grace_s: float = 2.0) -> None:
    """Cancels what is still running once the service has stopped, and waits
    for it a bounded time: asyncio.run would wait for ever on a task that
    never finishes (seen: a retriever that outlived its stack by an hour,
    idle in the runner's cancel-all after a clean stop)."""
    stragglers = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in stragglers:
        task.cancel()
    if stragglers:
        loop.run_until_complete(asyncio.wait(stragglers, timeout=grace_s))
    stuck = [t for t in stragglers if not t.done()]
    if stuck:
        log.warning(
            "tasks still running at exit, abandoned",
            extra={"fields": {"tasks": [repr(t.get_coro()) for t in stuck][:5]}},
        )
    with contextlib.suppress(RuntimeError):
        loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
