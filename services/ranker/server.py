"""Server factory of the ranker service: returns an unstarted server."""

from __future__ import annotations

from recserve_kit import transport
from recserve_kit.health import DependencyProbe
from recserve_kit.item_watch import ItemWatch
from recserve_kit.server import Registration, Service, build_server
from services.ranker.config import RankerSettings
from services.ranker.domain import Ranker
from services.ranker.servicer import RankerServicer

SERVICE_NAME = "recserve.ranker.v1.RankerService"


async def create_server(settings: RankerSettings) -> Service:
    ranker = Ranker(settings)
    features = transport.aio_channel(settings.features_addr, settings.tls("ranker"))
    watch = ItemWatch(features, ranker.items.replace, ranker.items.update)
    service = build_server(
        "ranker",
        settings,
        [
            Registration(
                RankerServicer(ranker),
                SERVICE_NAME,
                admin_methods=frozenset(
                    {
                        "LoadModel",
                        "StartRollout",
                        "GetRollout",
                        "PauseRollout",
                        "ResumeRollout",
                        "PromoteRollout",
                        "AbortRollout",
                    }
                ),
            )
        ],
        probes=[
            # Ready only while Triton serves the pinned versions of both
            # models, and once the item-feature table holds the catalogue.
            DependencyProbe("triton", ranker.models_ready, settings.health_interval_s, 2.0),
            DependencyProbe("item_features", watch.healthy, settings.health_interval_s),
        ],
    )

    async def advertise() -> None:
        ranker.models.replica.advertise(service.port)

    service.on_start.append(advertise)
    service.run_in_background(watch.run)
    service.run_in_background(ranker.judge_forever)
    service.cleanups.append(ranker.close)
    service.cleanups.append(features.close)
    service.domain = ranker
    return service
