"""The container healthcheck asks grpc.health.v1: SERVING passes, NOT_SERVING
(a required dependency down) and no server at all fail."""

import asyncio
import subprocess
import sys

from recserve_kit.config import ServiceSettings
from recserve_kit.health import DependencyProbe
from recserve_kit.server import build_server
from tests.helpers import apoll_until, free_port


def healthcheck(address: str) -> int:
    command = [sys.executable, "-m", "recserve_kit.healthcheck", address]
    return subprocess.run(command, capture_output=True).returncode


async def test_healthcheck_exit_code_follows_grpc_health():
    dependency_up = {"ok": True}

    async def check() -> bool:
        return dependency_up["ok"]

    settings = ServiceSettings(port=0, shutdown_drain_s=0)
    service = build_server("probe", settings, [], probes=[DependencyProbe("store", check, 0.02)])
    await service.start()
    try:

        async def exit_code_is(code: int) -> bool:
            return await asyncio.to_thread(healthcheck, service.address) == code

        await apoll_until(lambda: exit_code_is(0), 20)
        dependency_up["ok"] = False
        await apoll_until(lambda: exit_code_is(1), 20)
    finally:
        await service.stop(0)
    assert healthcheck(f"127.0.0.1:{free_port()}") == 1
