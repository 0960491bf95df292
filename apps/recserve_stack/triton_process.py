"""One tritonserver process (pytriton wheel), started the way the stack runner
starts it; for tests and benchmarks that need Triton alone."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from recserve_kit.transport import Tls
from recserve_stack import pki, triton
from recserve_stack.probes import wait_until
from recserve_stack.settings import StackSettings


def free_ports(count: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < count:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.add(int(sock.getsockname()[1]))
    return sorted(ports)


@dataclass
class TritonProcess:
    process: subprocess.Popen[bytes]
    settings: StackSettings
    log: Path

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.settings.triton_grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.triton_http_port}"

    @property
    def tls(self) -> Tls | None:
        """The operator's certificate when Triton runs with mutual TLS."""
        return Tls.load(self.settings.tls_dir, "operator") if self.settings.tls else None

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"tritonserver exited:\n{self.log.read_text()[-3000:]}")
        return asyncio.run(triton.ready(self.settings, self.tls))

    @property
    def ports(self) -> list[int]:
        s = self.settings
        return [s.triton_http_port, s.triton_grpc_port, s.triton_metrics_port]

    def stop(self) -> None:
        """Killed with its python-backend stubs, as the stack runner stops
        it: Triton keeps nothing, and its own stop waits seconds on its
        stubs. Its shared memory is removed after."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        triton.remove_shared_memory(self.settings)


def start_triton(
    data_dir: Path,
    repository: Path,
    models: list[str],
    ports: list[int] | None = None,
    tls: bool = False,
) -> TritonProcess:
    """Plaintext unless ``tls``: then with the stack's mutual TLS and control
    secret, from a CA made in ``data_dir/tls``."""
    http, grpc_port, metrics = ports or free_ports(3)
    settings = StackSettings(
        tls=tls,
        data_dir=data_dir,
        triton_repository=repository,
        triton_http_port=http,
        triton_grpc_port=grpc_port,
        triton_metrics_port=metrics,
    )
    log = data_dir / "triton.log"
    data_dir.mkdir(parents=True, exist_ok=True)
    if tls:
        pki.ensure_pki(settings.tls_dir)
    triton.remove_shared_memory(settings)
    with log.open("ab") as out:
        process = subprocess.Popen(
            triton.command(settings, models),
            env=triton.environment(settings),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return TritonProcess(process, settings, log)


@contextmanager
def running_triton(
    data_dir: Path, repository: Path, models: list[str], tls: bool = False
) -> Iterator[TritonProcess]:
    server = start_triton(data_dir, repository, models, tls=tls)
    try:
        try:
            wait_until(server.ready, 180, "Triton ready")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}:\n{server.log.read_text()[-3000:]}") from None
        yield server
    finally:
        server.stop()
