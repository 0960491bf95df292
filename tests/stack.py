"""Starts the real stack through the same runner `make run` uses."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psutil

from recserve_kit import transport
from recserve_kit.transport import Tls
from recserve_stack.settings import small_host
from tests.helpers import free_port_block, poll_until

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class RunningStack:
    process: subprocess.Popen[str]
    env: dict[str, str]
    data_dir: Path
    lines: list[str] = field(default_factory=list)

    def port(self, name: str) -> int:
        return int(self.env[f"RECSERVE_STACK_{name.upper()}_PORT"])

    @property
    def envoy_address(self) -> str:
        return f"127.0.0.1:{self.port('envoy')}"

    @property
    def edge_address(self) -> str:
        """Envoy's TLS listener, the one app backends on other hosts call."""
        return f"127.0.0.1:{self.port('edge')}"

    @property
    def edge_ca(self) -> Path:
        """The CA of the edge certificate the runner made."""
        return self.data_dir / "edge" / "ca.crt"

    @property
    def tls(self) -> Tls:
        """The operator's certificate: internal ports take nothing else."""
        return Tls.load(self.data_dir / "tls", "operator")

    def internal_channel(self, name: str) -> grpc.Channel:
        """A blocking mutual-TLS channel to an internal port ("retriever", ...)."""
        return transport.channel(f"127.0.0.1:{self.port(name)}", self.tls)

    def gateway_channels(self) -> list[grpc.Channel]:
        """A mutual-TLS channel to each gateway replica (each has its own caches)."""
        extra = json.loads(self.env.get("RECSERVE_STACK_GATEWAY_EXTRA_PORTS", "[]"))
        ports = [self.port("gateway"), *extra]
        return [transport.channel(f"127.0.0.1:{port}", self.tls) for port in ports]

    @property
    def socket_dir(self) -> Path:
        """Where the stack's processes call each other (Unix sockets)."""
        from recserve_stack.settings import StackSettings

        return StackSettings(data_dir=self.data_dir).socket_dir

    def triton_shared_memory(self) -> set[str]:
        """The names of this stack's Triton's python-backend regions in /dev/shm."""
        from recserve_stack import triton
        from recserve_stack.settings import StackSettings

        settings = StackSettings(data_dir=self.data_dir, triton_grpc_port=self.port("triton_grpc"))
        return {path.name for path in triton.shared_memory(settings)}

    def internal_aio_channel(self, name: str) -> grpc.aio.Channel:
        return transport.aio_channel(f"127.0.0.1:{self.port(name)}", self.tls)

    def output(self) -> str:
        return "\n".join(self.lines)

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    # The e2e suite also runs against Compose (tests/compose_stack.py): what
    # it asks of a stack goes through the methods below, which both have.
    kind = "local"

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.port(name)}"

    def serving(self, address: str) -> bool:
        """Whether the port at ``address`` answers SERVING (the runner's probe)."""
        from recserve_stack.probes import grpc_serving

        return asyncio.run(grpc_serving(address, timeout_s=5, tls=self.tls))

    def wait_whole(self, timeout_s: float = 120) -> None:
        """Until every gateway's and backend's port serves: after a kill, a
        full answer may come from another request-path process while the
        killed one, whose modules take the writes, still starts."""
        extra = json.loads(self.env.get("RECSERVE_STACK_GATEWAY_EXTRA_PORTS", "[]"))
        addresses = [self.address(n) for n in ("gateway", "features", "retriever", "ranker")]
        addresses += [f"127.0.0.1:{port}" for port in extra]
        poll_until(lambda: all(map(self.serving, addresses)), timeout_s, 0.2, "the stack whole")

    def channel_options(self, name: str) -> list[tuple[str, str]]:
        return []  # certificates name 127.0.0.1

    def component_pids(self, marker: str) -> list[int]:
        """The pids of the components whose command line holds ``marker``
        (a process that exited meanwhile, such as a killed component not
        reaped yet, is not one); a request-path process that follows the
        first's writers after the first."""
        found = []
        for process in self.descendants():
            try:
                if marker in " ".join(process.cmdline()):
                    follows = process.environ().get("RECSERVE_RETRIEVER_FOLLOW") == "true"
                    found.append((follows, process.pid))
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
        return [pid for _, pid in sorted(found, key=lambda found: found[0])]

    def gateway_pids(self) -> list[int]:
        """The gateways' pids: first the one that hosts the backends
        (``RECSERVE_STACK_ONE_PROCESS``), when the stack runs one."""
        return self.component_pids("services.one_process") + self.component_pids("services.gateway")

    def process_of(self, marker: str) -> str:
        """The marker of the process that runs ``marker``'s module: the one
        process, for a hosted backend when the stack runs the request path
        in one process."""
        hosted = ("services.features", "services.retriever", "services.ranker")
        if self.env.get("RECSERVE_STACK_ONE_PROCESS") == "true" and marker in hosted:
            return "services.one_process"
        return marker

    def component_pid(self, marker: str) -> int:
        found = self.component_pids(marker)
        if not found:
            raise AssertionError(f"no process matching {marker}")
        return found[0]

    def kill(self, marker: str, replica: int = 0) -> int:
        """SIGKILL a component, as a crash would; returns its pid."""
        pid = self.component_pids(marker)[replica]
        os.kill(pid, signal.SIGKILL)
        return pid

    def restarts(self) -> int:
        """Restarts of components by the runner so far."""
        return self.output().count("restarting (")

    def metrics(self, service: str, replica: int = 0) -> str:
        """The /metrics text of a service's replica (a hosted module's are
        its host's, the gateway's)."""
        from recserve_stack.settings import StackSettings

        if replica == 0 and self.process_of(f"services.{service}") == "services.one_process":
            service = "gateway"
        base = int(self.env["RECSERVE_STACK_METRICS_BASE_PORT"])
        port = StackSettings(metrics_base_port=base).metrics_port(service, replica)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())


PORT_NAMES = [
    "envoy",
    "envoy_admin",
    "gateway",
    "features",
    "retriever",
    "ranker",
    "triton_http",
    "triton_grpc",
    "triton_metrics",
    "edge",  # Envoy's TLS listener (on loopback, as everything here)
]


CanaryEnv = dict[str, str] | Callable[[dict[str, str]], dict[str, str]]


def stack_env(data_dir: Path, canary: CanaryEnv | None = None, **overrides: str) -> dict[str, str]:
    # One block of consecutive free ports: the named ones, the second
    # gateway's, a canary gateway's, a standby gateway's, then seven metrics
    # ports (the runner counts them up from a base, so they must be free as
    # a run). Two active gateways unless standby="1" asks for one and a standby.
    base = free_port_block(len(PORT_NAMES) + 3 + 7)
    env = {**os.environ, "RECSERVE_STACK_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1"}
    for offset, name in enumerate(PORT_NAMES):
        env[f"RECSERVE_STACK_{name.upper()}_PORT"] = str(base + offset)
    env["RECSERVE_STACK_GATEWAY_EXTRA_PORTS"] = f"[{base + len(PORT_NAMES)}]"  # a second gateway
    if canary is not None:
        # A canary gateway build: the stable one's environment plus ``canary``
        # (or what it makes of the stack's ports).
        env["RECSERVE_STACK_GATEWAY_CANARY_PORT"] = str(base + len(PORT_NAMES) + 1)
        changes = canary(env) if callable(canary) else canary
        env["RECSERVE_STACK_GATEWAY_CANARY_ENV"] = json.dumps(changes)
    env["RECSERVE_STACK_GATEWAY_STANDBY_PORT"] = "0"
    env["RECSERVE_STACK_METRICS_BASE_PORT"] = str(base + len(PORT_NAMES) + 3)
    if overrides.pop("standby", ""):
        env["RECSERVE_STACK_GATEWAY_EXTRA_PORTS"] = "[]"
        env["RECSERVE_STACK_GATEWAY_STANDBY_PORT"] = str(base + len(PORT_NAMES) + 2)
    env.update(overrides)
    # Said outright, so that a test knows which processes run what.
    env.setdefault("RECSERVE_STACK_ONE_PROCESS", str(small_host()).lower())
    return env


UP = [sys.executable, "-m", "recserve_stack", "up"]


def start_stack(
    data_dir: Path,
    canary: CanaryEnv | None = None,
    command: list[str] | str = UP,
    **overrides: str,
) -> RunningStack:
    """The runner started by ``command`` (a shell line, as a user types it,
    runs in a session of its own: stopping it signals make and the runner
    alike)."""
    env = stack_env(data_dir, canary, **overrides)
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        shell=isinstance(command, str),
        start_new_session=isinstance(command, str),
    )
    stack = RunningStack(process, env, data_dir)

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            stack.lines.append(line.rstrip())

    threading.Thread(target=pump, daemon=True).start()
    return stack


def wait_ready(stack: RunningStack, timeout_s: float = 240) -> None:
    def ready() -> bool:
        if stack.process.poll() is not None:
            raise AssertionError(f"stack exited early:\n{stack.output()[-4000:]}")
        return "recserve stack ready" in stack.lines

    poll_until(ready, timeout_s, 0.2, "the stack to be ready")


def stop_stack(stack: RunningStack, timeout_s: float = 60) -> int:
    """Stops the stack and waits until every process of it has ended: under
    a shell line, make exits at once while the runner still drains."""
    processes = stack.descendants()
    if stack.process.poll() is None:
        if isinstance(stack.process.args, str):  # a shell line's session
            os.killpg(stack.process.pid, signal.SIGTERM)
        else:
            stack.process.send_signal(signal.SIGTERM)
    code = stack.process.wait(timeout_s)
    psutil.wait_procs(processes, timeout=timeout_s)
    return code


@contextmanager
def running_stack(
    data_dir: Path, canary: CanaryEnv | None = None, **overrides: str
) -> Iterator[RunningStack]:
    stack = start_stack(data_dir, canary, **overrides)
    try:
        wait_ready(stack)
        yield stack
    finally:
        stop_stack(stack)
