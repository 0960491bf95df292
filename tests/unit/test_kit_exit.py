"""A service process exits after a clean stop even when some task will not
finish: the kit cancels what is left and waits for it a bounded time
instead of for ever."""

import signal
from pathlib import Path

from tests.helpers import poll_until, python_process

SERVICE = """
import asyncio
from recserve_kit.config import ServiceSettings
from recserve_kit.server import build_server, run

async def stubborn() -> None:
    while True:  # ignores cancellation: the kind of task that hung an exit
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue

async def factory():
    service = build_server("test", ServiceSettings(port=0, shutdown_drain_s=0), [])
    asyncio.get_running_loop().create_task(stubborn())
    print("started", flush=True)
    return service, None

run(factory)
"""


def catches_sigterm(pid: int) -> bool:
    """Whether the process has its SIGTERM handler installed yet (the kit
    installs it as it starts serving, after the factory has printed)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


def test_a_task_that_ignores_cancellation_does_not_keep_the_process_alive(tmp_path):
    process = python_process(SERVICE, tmp_path)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "started"
        poll_until(lambda: catches_sigterm(process.pid), 30, 0.05, "the SIGTERM handler")
        process.send_signal(signal.SIGTERM)
        poll_until(lambda: process.poll() is not None, 30, 0.1, "the process to exit")
        output = process.stdout.read()
        assert process.returncode == 0, output
        assert "abandoned" in output, output
    finally:
        if process.poll() is None:
            process.kill()
