"""A real service process: serving on start, graceful exit on SIGTERM."""

import asyncio
import os
import signal
import subprocess
import sys

from recserve_stack.probes import grpc_serving
from tests.helpers import free_port, poll_until


def test_service_process_serves_then_exits_cleanly_on_sigterm(tmp_path):
    port = free_port()
    env = {
        **os.environ,
        "RECSERVE_RETRIEVER_PORT": str(port),
        "RECSERVE_RETRIEVER_DATA_DIR": str(tmp_path),
        "RECSERVE_RETRIEVER_SHUTDOWN_DRAIN_S": "0.2",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "services.retriever"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        poll_until(
            lambda: asyncio.run(grpc_serving(f"127.0.0.1:{port}")), 60, 0.1, "retriever SERVING"
        )
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    assert '"msg": "shutting down"' in output
    assert '"msg": "stopped"' in output
