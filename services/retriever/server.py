"""Server factory of the retriever service: returns an unstarted server."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from pathlib import Path

from recserve_kit.health import DependencyProbe
from recserve_kit.server import Registration, Service, build_server
from services.retriever.config import RetrieverSettings
from services.retriever.domain import Generations, Retriever
from services.retriever.follower import Follower
from services.retriever.item_tower import ItemTower
from services.retriever.servicer import RetrieverServicer

SERVICE_NAME = "recserve.retriever.v1.RetrieverService"
ROLLOUT_FOLLOW_S = 5.0  # how often the rollout is looked at when the refresh is off
log = logging.getLogger(__name__)


def writer_dir(settings: RetrieverSettings) -> Path:
    return settings.data_dir / "qdrant" / settings.collection


def alive(pid: str) -> bool:
    """Whether a process of this host has the pid (the followers share it)."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (ValueError, PermissionError):
        return True  # not a pid of ours to judge
    return True


def follower_generations(settings: RetrieverSettings) -> Generations:
    """A follower's own shards, in a folder of this process's: each build
    in a new one (a rebuild after a feed gap serves beside the old)."""
    from services.retriever.edge_store import EdgeStore

    root = settings.data_dir / "qdrant"
    for left in root.glob(f"{settings.collection}.follower-*"):
        if not alive(left.name.rpartition("-")[2]):  # a follower killed: its copy is garbage
            shutil.rmtree(left, ignore_errors=True)
    state_dir = root / f"{settings.collection}.follower-{os.getpid()}"
    shutil.rmtree(state_dir, ignore_errors=True)

    def create(name: str, dim: int) -> EdgeStore:
        path = state_dir / f"{name}-{uuid.uuid4().hex[:8]}"
        return EdgeStore.create(path, name, dim, settings.hnsw_m, settings.hnsw_ef_construct)

    return Generations(
        state_dir, create, lambda name, dim: EdgeStore.open(state_dir / name, name, dim)
    )


def generations_for(settings: RetrieverSettings) -> Generations:
    state_dir = writer_dir(settings)
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


async def follow_writer(
    service: Service, retriever: Retriever, settings: RetrieverSettings
) -> None:
    """A follower serves from the start where the writer has a generation,
    then follows it (``follower.py``)."""
    follower = Follower(retriever, writer_dir(settings))
    try:
        await follower.step()
    except Exception:
        log.exception("following the writer failed; trying again")
    service.run_in_background(lambda: follower.run(settings.follow_interval_s))


async def create_server(settings: RetrieverSettings) -> Service:
    if settings.follow and settings.qdrant_url:
        raise ValueError("follow: only the embedded Qdrant Edge backend has followers")
    generations = follower_generations(settings) if settings.follow else generations_for(settings)
    retriever = Retriever(settings, generations)
    item_tower = ItemTower(settings)
    if settings.follow:
        retriever.writer = f"the retriever writing {writer_dir(settings)}"
    elif settings.qdrant_url != ":memory:":
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
        if settings.follow:  # its shards are its own, rebuilt at each start
            shutil.rmtree(generations.state_dir, ignore_errors=True)

    if settings.follow:
        await follow_writer(service, retriever, settings)
    else:
        service.run_in_background(watch_artifacts)
    service.cleanups.append(close)
    service.domain = retriever
    return service
