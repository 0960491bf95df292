"""A real service process: serving on start, graceful exit on SIGTERM."""

import asyncio
import os
import signal
import subprocess
import sys

from recserve_stack.probes import grpc_serving
from tests.helpers import data_dir_with_artifacts, free_port, poll_until


def test_service_process_serves_then_exits_cleanly_on_sigterm(tmp_path, built):
    port = free_port()
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    env = {
        **os.environ,
        "RECSERVE_RETRIEVER_PORT": str(port),
        "RECSERVE_RETRIEVER_DATA_DIR": str(data_dir),
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
