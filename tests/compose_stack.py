"""The Compose stack (make compose-test) behind the interface of tests/stack.py's
RunningStack, so the e2e suite runs against either (RECSERVE_E2E_STACK=compose).

Only Envoy's :8080 is published; internal ports are reached on the
containers' addresses on the bridge network (the host routes to them), with
the operator's certificate and the service's name as the TLS target name.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from recserve_kit import transport
from recserve_kit.transport import Tls
from tests.helpers import poll_until

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "recserve"
# `${NAME:-default}` in the Compose files: the variable, and its value when unset.
VARIABLE = re.compile(r"\$\{(\w+):-([^}]*)\}")
COMPOSE = ["docker-compose", "-p", PROJECT, "-f", "compose.yaml", "-f", "compose.local.yaml"]
# (Compose service, its port) per name the tests use.
PORTS = {
    "envoy": ("envoy", 8080),
    "gateway": ("gateway", 50051),
    "features": ("features", 50052),
    "retriever": ("retriever", 50053),
    "ranker": ("ranker", 50054),
    "triton_http": ("triton", 8000),
    "triton_grpc": ("triton", 8001),
}
METRICS_PORTS = {"gateway": 9101, "features": 9102, "retriever": 9103, "ranker": 9104}
# A process marker of the local stack -> the Compose service that runs it.
SERVICES = {
    "services.gateway": "gateway",
    "services.features": "features",
    "services.retriever": "retriever",
    "services.ranker": "ranker",
    "tritonserver": "triton",
    "bin/tritonserver": "triton",
}


def docker(*args: str) -> str:
    return subprocess.run(
        ["docker", *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def project_containers(*labels: str) -> list[str]:
    """Ids of the project's containers, running or not, with these labels.
    (The docker CLI, not docker-compose: a tenth of the time, which matters
    to tests that read a figure that decays within a second.)"""
    filters = [f"label=com.docker.compose.project={PROJECT}", *(f"label={x}" for x in labels)]
    return docker("ps", "-aq", *(f"--filter={f}" for f in filters)).split()


def ip(container: dict[str, object]) -> str:
    """A container's address on the stack's network (the host routes to it)."""
    networks = container["NetworkSettings"]["Networks"]  # type: ignore[index]
    return str(networks["recserve"]["IPAddress"])


@dataclass
class ComposeStack:
    data_dir: Path  # a copy of the data volume, taken after the nightly run
    kind = "compose"

    @property
    def envoy_address(self) -> str:
        return "127.0.0.1:8080"

    @property
    def edge_address(self) -> str:
        return "127.0.0.1:8443"

    @property
    def edge_ca(self) -> Path:
        return self.data_dir / "edge" / "ca.crt"

    @property
    def tls(self) -> Tls:
        return Tls.load(self.data_dir / "tls", "operator")

    def containers(self, service: str) -> list[dict[str, object]]:
        """``docker inspect`` of the service's containers, replica 1 first."""
        ids = project_containers(f"com.docker.compose.service={service}")
        found = json.loads(docker("inspect", *ids)) if ids else []
        number = "com.docker.compose.container-number"
        return sorted(found, key=lambda c: int(c["Config"]["Labels"][number]))

    def address(self, name: str) -> str:
        service, port = PORTS[name]
        return f"{ip(self.containers(service)[0])}:{port}"

    def channel_options(self, name: str) -> list[tuple[str, str]]:
        # The certificates name the service, not the container's address.
        return [("grpc.ssl_target_name_override", PORTS[name][0])]

    def internal_channel(self, name: str) -> grpc.Channel:
        return transport.channel(self.address(name), self.tls, self.channel_options(name))

    def gateway_channels(self) -> list[grpc.Channel]:
        """A mutual-TLS channel to each gateway replica (each has its own caches)."""
        addresses = [f"{ip(c)}:{PORTS['gateway'][1]}" for c in self.containers("gateway")]
        options = self.channel_options("gateway")
        return [transport.channel(address, self.tls, options) for address in addresses]

    def internal_aio_channel(self, name: str) -> grpc.aio.Channel:
        return transport.aio_channel(self.address(name), self.tls, self.channel_options(name))

    def component_pids(self, marker: str) -> list[int]:
        """Host pids of the main process of each container running ``marker``."""
        return [int(c["State"]["Pid"]) for c in self.containers(SERVICES[marker])]

    def gateway_pids(self) -> list[int]:
        """The gateways' pids (in Compose each service is its own container)."""
        return self.component_pids("services.gateway")

    def process_of(self, marker: str) -> str:
        return marker  # each service its own container

    def component_pid(self, marker: str) -> int:
        return self.component_pids(marker)[0]

    def kill(self, marker: str, replica: int = 0) -> int:
        """SIGKILL a container's main process from the host, as a crash would
        (``docker kill`` would count as stopped by hand: no restart)."""
        pid = self.component_pids(marker)[replica]
        os.kill(pid, signal.SIGKILL)
        return pid

    def wait_whole(self, timeout_s: float = 120) -> None:
        """Until every gateway's and backend's container serves again (after
        a kill: Compose restarts it)."""

        def whole() -> bool:
            names = ("features", "retriever", "ranker")
            channels = [*self.gateway_channels(), *map(self.internal_channel, names)]
            try:
                return all(map(serving, channels))
            finally:
                for channel in channels:
                    channel.close()

        poll_until(whole, timeout_s, 0.5, "every service serving")

    def restarts(self) -> int:
        """Restarts of every service container so far (restart: unless-stopped)."""
        ids = project_containers()
        return sum(int(c["RestartCount"]) for c in json.loads(docker("inspect", *ids)))

    def metrics(self, service: str, replica: int = 0) -> str:
        """The /metrics text of a service's replica (Compose binds it on the
        container's network address, for Prometheus)."""
        url = f"http://{ip(self.containers(service)[replica])}:{METRICS_PORTS[service]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())


def serving(channel: grpc.Channel) -> bool:
    try:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
    except grpc.RpcError:
        return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def nightly_run(run_id: str) -> None:
    """The nightly re-scoring job in its container (profile nightly)."""
    subprocess.run(
        [
            *COMPOSE,
            "--profile",
            "nightly",
            "run",
            "--rm",
            "rescore",
            "rescore",
            "run",
            "--data-dir",
            "/data",
            "--redis-url",
            "redis://redis:6379/0",
            "--master",
            "local[2]",
            "--run-id",
            run_id,
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )


def copy_data(destination: Path) -> Path:
    """A copy of the data volume (auth, TLS, artifacts, re-scoring runs)."""
    (init,) = project_containers("com.docker.compose.service=init")
    docker("cp", f"{init}:/data", str(destination))
    return destination
