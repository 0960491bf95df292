"""A further request-path process (services.one_process) builds its modules
only once the first process's three serve: the writers (the index, the
online store, the rollout's lock) stay the first's by design."""

import asyncio

from recserve_kit.config import ServiceSettings
from recserve_kit.health import DependencyProbe
from recserve_kit.server import build_server
from services.gateway.config import GatewaySettings
from services.one_process.__main__ import writers_serving


async def test_a_follower_waits_until_the_first_processs_modules_serve():
    ready = {"ok": False}

    async def check() -> bool:
        return ready["ok"]

    # One server stands for the first process's three modules.
    first = build_server(
        "first", ServiceSettings(port=0), [], probes=[DependencyProbe("triton", check, 0.05)]
    )
    await first.start()
    try:
        address = first.address
        settings = GatewaySettings(
            features_addr=address, retriever_addr=address, ranker_addr=address
        )
        waiting = asyncio.create_task(writers_serving(settings))
        await asyncio.sleep(1.0)
        assert not waiting.done()  # the first's ranker is not ready: nothing is built yet
        ready["ok"] = True
        await asyncio.wait_for(waiting, 30)
    finally:
        await first.stop(0)
