"""Starts one real service process for a benchmark and waits until it serves."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hdrh.histogram import HdrHistogram

from recserve_stack.probes import grpc_serving, wait_until

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def service_process(name: str, env: dict[str, str], timeout_s: float = 180) -> Iterator[str]:
    port = free_port()
    prefix = f"RECSERVE_{name.upper()}_"
    full_env = {**os.environ, prefix + "PORT": str(port), **env}
    process = subprocess.Popen(
        [sys.executable, "-m", f"services.{name}"],
        cwd=ROOT,
        env=full_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"127.0.0.1:{port}"

    def serving() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited during start")
        return asyncio.run(grpc_serving(address))

    try:
        wait_until(serving, timeout_s, f"{name} SERVING")
        yield address
    finally:
        process.terminate()
        process.wait(30)


def percentiles(histogram: HdrHistogram) -> dict[str, float]:
    return {
        "p50_ms": round(histogram.get_value_at_percentile(50) / 1000, 3),
        "p99_ms": round(histogram.get_value_at_percentile(99) / 1000, 3),
        "max_ms": round(histogram.get_max_value() / 1000, 3),
    }


def new_histogram() -> HdrHistogram:
    return HdrHistogram(1, 60_000_000, 3)
