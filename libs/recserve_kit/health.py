"""Standard grpc.health.v1 health with per-dependency status.

The overall status ("" and every registered service name) is SERVING only
while every dependency is healthy and the server is not shutting down. Each
dependency is also visible on its own, as ``dependency/<name>``, so an
operator can see which one is failing. Probes run in the background and
drive the statuses; nothing here claims SERVING without checking.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

log = logging.getLogger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
FAILING_PROBE_S = 0.2


async def serving(channel: grpc.aio.Channel, timeout_s: float = 0.5) -> bool:
    """Whether the server at ``channel`` reports its overall status SERVING."""
    try:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=timeout_s
        )
    except grpc.aio.AioRpcError:
        return False
    return reply.status == SERVING


@dataclass(frozen=True)
class DependencyProbe:
    """A named check of one dependency, run every ``interval_s``."""

    name: str
    check: Callable[[], Awaitable[bool]]
    interval_s: float = 1.0
    timeout_s: float = 1.0
    # False: reported as dependency/<name> but does not gate the overall
    # status (the gateway serves degraded answers without its backends).
    required: bool = True


class HealthStatus:
    def __init__(
        self,
        service_names: Sequence[str],
        dependencies: Sequence[str] = (),
        optional: Sequence[str] = (),
    ) -> None:
        self.servicer = health.aio.HealthServicer()
        self._service_names = ["", *service_names]
        self._dependency_ok = {name: False for name in [*dependencies, *optional]}
        self._optional = set(optional)
        self._started = False
        self._shutting_down = False
        self._tasks: list[asyncio.Task[None]] = []

    def dependency_name(self, name: str) -> str:
        return f"dependency/{name}"

    @property
    def serving(self) -> bool:
        required = (ok for name, ok in self._dependency_ok.items() if name not in self._optional)
        return self._started and not self._shutting_down and all(required)

    def dependency_ok(self, name: str) -> bool:
        return self._dependency_ok[name]

    async def mark_started(self) -> None:
        self._started = True
        await self._publish()

    async def set_dependency(self, name: str, ok: bool) -> None:
        if self._dependency_ok.get(name) == ok:
            return
        self._dependency_ok[name] = ok
        log.info(
            "dependency status changed",
            extra={"fields": {"dependency": name, "healthy": ok}},
        )
        await self._publish()

    async def _publish(self) -> None:
        if self._shutting_down:
            return
        for name, ok in self._dependency_ok.items():
            await self.servicer.set(self.dependency_name(name), SERVING if ok else NOT_SERVING)
        overall = SERVING if self.serving else NOT_SERVING
        for name in self._service_names:
            await self.servicer.set(name, overall)

    async def enter_shutdown(self) -> None:
        """NOT_SERVING everywhere, and no later change can undo it."""
        self._shutting_down = True
        for task in self._tasks:
            task.cancel()
        await self.servicer.enter_graceful_shutdown()

    def start_probes(self, probes: Sequence[DependencyProbe]) -> None:
        for probe in probes:
            self._tasks.append(asyncio.create_task(self._run_probe(probe)))

    async def _run_probe(self, probe: DependencyProbe) -> None:
        while True:
            try:
                ok = await asyncio.wait_for(probe.check(), probe.timeout_s)
            except (TimeoutError, OSError, ConnectionError) as exc:
                log.debug("probe %s failed: %s", probe.name, exc)
                ok = False
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("probe %s raised", probe.name, exc_info=True)
                ok = False
            await self.set_dependency(probe.name, ok)
            # A failing dependency is looked at again soon: a process is
            # ready within a fifth of a second of what it waits for.
            await asyncio.sleep(probe.interval_s if ok else min(probe.interval_s, FAILING_PROBE_S))
