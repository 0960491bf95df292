"""bench chaos's freeze: the process is stopped, then let go by itself."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import psutil

from bench.chaos import _freeze


async def statuses_until_let_go(process: psutil.Process, freeze_s: float) -> list[str]:
    """Freeze ``process``; its statuses, polled on the same loop that holds
    the SIGCONT, until it runs again after having stopped (or 30 s)."""
    _freeze(process.pid, freeze_s)
    seen: list[str] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while loop.time() < deadline:
        seen.append(process.status())
        if psutil.STATUS_STOPPED in seen and seen[-1] != psutil.STATUS_STOPPED:
            break
        await asyncio.sleep(0.01)
    return seen


def test_a_frozen_process_is_stopped_and_then_let_go():
    # A process blocked on its stdin until the test ends.
    reader = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        seen = asyncio.run(statuses_until_let_go(psutil.Process(reader.pid), 1.0))
        assert psutil.STATUS_STOPPED in seen, seen
        assert seen[-1] != psutil.STATUS_STOPPED, seen[-10:]
    finally:
        reader.kill()
        reader.wait()
