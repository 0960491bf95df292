"""A further request-path process (services.one_process) builds its modules
only once the first process's three serve: the writers (the index, the
online store, the rollout's lock) stay the first's by design."""

import asyncio

import services.one_process.__main__ as one_process
from recserve_kit.config import ServiceSettings
from recserve_kit.health import DependencyProbe
from recserve_kit.server import build_server
from services.gateway.config import GatewaySettings


async def test_a_follower_waits_until_the_first_processs_modules_serve(monkeypatch):
    ready = {"ok": False}
    answers: list[bool] = []  # what the follower was told each time it asked
    asked = asyncio.Event()

    async def serving(channel) -> bool:
        answers.append(await real_serving(channel))
        if len(answers) >= 6:  # each of its three channels asked twice
            asked.set()
        return answers[-1]

    real_serving = one_process.serving
    monkeypatch.setattr(one_process, "serving", serving)

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
        waiting = asyncio.create_task(one_process.writers_serving(settings))
        await asyncio.wait_for(asked.wait(), 30)
        # Told NOT_SERVING (the first's ranker is not ready): nothing is built yet.
        assert not any(answers) and not waiting.done()
        ready["ok"] = True
        await asyncio.wait_for(waiting, 30)
    finally:
        await first.stop(0)
