"""Server factory of the retriever service: returns an unstarted server."""

from __future__ import annotations

import asyncio
import logging

from recserve_kit.health import DependencyProbe
from recserve_kit.server import Registration, Service, build_server
from services.retriever.config import RetrieverSettings
from services.retriever.domain import Generations, Retriever
from services.retriever.item_tower import ItemTower
from services.retriever.servicer import RetrieverServicer

SERVICE_NAME = "recserve.retriever.v1.RetrieverService"
ROLLOUT_FOLLOW_S = 5.0  # how often the rollout is looked at when the refresh is off
log = logging.getLogger(__name__)


def generations_for(settings: RetrieverSettings) -> Generations:
    state_dir = settings.data_dir / "qdrant" / settings.collection
    if not settings.qdrant_url:
        from services.retriever.edge_store import EdgeStore

        return Generations(
            state_dir,
            create=lambda name, dim: EdgeStore.create(
                state_dir / name, name, dim, settings.hnsw_m, settings.hnsw_ef_construct
            ),
            open_=lambda name, dim: EdgeStore.open(state_dir / name, name, dim),
        )
    from services.retriever.server_store import ServerStore, connect

    client = connect(settings.qdrant_url)
    alias = settings.collection
    return Generations(
        state_dir,
        create=lambda name, dim: ServerStore.create(
            client, f"{alias}_{name}", name, dim, settings.hnsw_m, settings.hnsw_ef_construct
        ),
        open_=lambda name, dim: ServerStore(client, f"{alias}_{name}", name, dim),
        publish=lambda store: store.switch_alias(alias),  # type: ignore[attr-defined]
    )


async def create_server(settings: RetrieverSettings) -> Service:
    retriever = Retriever(settings, generations_for(settings))
    item_tower = ItemTower(settings)
    if settings.qdrant_url != ":memory:":
        retriever.open_current()

    async def collection_loaded() -> bool:
        return retriever.ready

    service = build_server(
        "retriever",
        settings,
        [
            Registration(
                RetrieverServicer(retriever, item_tower),
                SERVICE_NAME,
                admin_methods=frozenset({"UpsertItems", "DeleteItems", "PrepareModelVersion"}),
            )
        ],
        probes=[DependencyProbe("collection", collection_loaded, interval_s=0.2)],
    )

    async def watch_artifacts() -> None:
        # Picks up a newly published artifact (and bootstraps an empty store)
        # every refresh_interval_s, or once with 0 (Kubernetes: the init Job
        # loads); either way drops a prepared model version whose rollout
        # ended unpromoted, so a rolled-back candidate's generation goes.
        refreshing = True
        while True:
            if refreshing:
                try:
                    await retriever.refresh_from_artifacts()
                except Exception:
                    log.exception("bulk refresh failed; still serving the previous generation")
                refreshing = bool(settings.refresh_interval_s)
            await retriever.preparer.follow_rollout()
            await asyncio.sleep(settings.refresh_interval_s or ROLLOUT_FOLLOW_S)

    async def close() -> None:
        retriever.close()
        await item_tower.close()

    service.run_in_background(watch_artifacts)
    service.cleanups.append(close)
    service.domain = retriever
    return service
