"""`python -m services.one_process`: the request path in one process.

The features, retriever and ranker modules and the gateway run on one event
loop; the gateway calls the three in-process (``recserve_kit.local_calls``),
with the same deadlines, error mapping, spans and metrics as over gRPC. Each
module still serves its own port, so tools, other processes (a standby
gateway, the ranker's replicas) and operators reach it as before. Envoy and
Triton stay their own processes. Each module reads its own settings
(``RECSERVE_FEATURES_*`` and so on); the process's metrics port is the
gateway's, and each module's spans carry its own service name.
"""

from __future__ import annotations

import asyncio
import logging

from recserve_kit.config import load_settings
from recserve_kit.health import serving
from recserve_kit.server import Served, init_process, run
from services.features.config import FeaturesSettings
from services.features.server import create_server as features_server
from services.gateway.config import GatewaySettings
from services.gateway.server import backend_channels
from services.gateway.server import create_server as gateway_server
from services.ranker.config import RankerSettings
from services.ranker.server import create_server as ranker_server
from services.retriever.config import RetrieverSettings
from services.retriever.server import create_server as retriever_server

HOSTED = ("features", "retriever", "ranker")
log = logging.getLogger(__name__)


async def writers_serving(settings: GatewaySettings) -> None:
    """Returns once the first process's modules serve. A follower (one more
    process per core) is started beside the first, not after it, so that
    its imports overlap the first's start; it builds its modules only now:
    what must have one writer (the index, the online store, the rollout's
    lock that the first ranker takes) is the first's by design, not by
    which process got there first."""
    channels = backend_channels(settings)
    log.info(
        "waiting for the writer's modules", extra={"fields": {"features": settings.features_addr}}
    )
    try:
        while not all([await serving(channel) for channel in channels.values()]):
            await asyncio.sleep(0.1)
    finally:
        for channel in channels.values():
            await channel.close()


async def main() -> Served:
    gateway_settings = load_settings(GatewaySettings)
    telemetry = init_process("gateway", gateway_settings, hosted=HOSTED)
    retriever_settings = load_settings(RetrieverSettings)
    if retriever_settings.follow:
        await writers_serving(gateway_settings)
    # Started in this order, stopped the other way round: each backend is up
    # before anything calls it (the ranker reads the catalogue from features).
    hosted = {
        "features": await features_server(load_settings(FeaturesSettings)),
        "retriever": await retriever_server(retriever_settings),
        "ranker": await ranker_server(load_settings(RankerSettings)),
    }
    gateway = await gateway_server(gateway_settings, hosted)
    return [*hosted.values(), gateway], telemetry


if __name__ == "__main__":
    run(main)
