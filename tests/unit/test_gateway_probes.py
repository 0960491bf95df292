"""The gateway's dependency probes: a backend hosted in its own process
(``services.one_process``) is asked in-process, the others at their address."""

from types import SimpleNamespace

import grpc

from services.gateway.server import dependency_probes

NOTHING_LISTENS = "127.0.0.1:1"


async def test_a_hosted_backend_is_probed_in_process_not_at_its_address():
    # A follower's channels reach the first process's modules; its calls
    # stay with its own, so those are what its dependency/<name> reports.
    module = SimpleNamespace(health=SimpleNamespace(serving=False))
    async with grpc.aio.insecure_channel(NOTHING_LISTENS) as channel:
        probes = {
            probe.name: probe
            for probe in dependency_probes(
                SimpleNamespace(loaded=True),
                SimpleNamespace(healthy=None),
                {"features": channel, "ranker": channel},
                {"ranker": module},
            )
        }
        assert not await probes["ranker"].check()
        module.health.serving = True
        assert await probes["ranker"].check()  # though nothing listens at its address
        assert not await probes["features"].check()  # not hosted: asked at its address
        assert not probes["ranker"].required and not probes["features"].required
