"""Server factory of the features service: returns an unstarted server."""

from __future__ import annotations

import asyncio
import logging

import pandas as pd
from feast import FeatureStore

from recserve_feast.repo import apply_and_publish, published_version, repo_config
from recserve_kit.health import DependencyProbe
from recserve_kit.server import Registration, Service, build_server
from recserve_model import artifacts
from services.features.config import FeaturesSettings
from services.features.domain import Features
from services.features.servicer import FeaturesServicer

SERVICE_NAME = "recserve.features.v1.FeatureService"
log = logging.getLogger(__name__)


def ensure_published(settings: FeaturesSettings) -> FeatureStore:
    """The store, after publishing the current artifact if it is not yet
    (where this process publishes: ``publish``).
    The artifact's files are verified only then: every look (each
    refresh_interval_s) hashing them all cost a 12 MB artifact 0.7% of the
    one process's CPU, and grows with the catalogue."""
    feast_dir = settings.data_dir / "feast"
    if settings.publish and published_version(
        feast_dir, settings.redis_url
    ) != artifacts.current_version(settings.data_dir):
        directory = artifacts.current(settings.data_dir)
        return apply_and_publish(feast_dir, directory, directory.name, settings.redis_url)
    return FeatureStore(config=repo_config(feast_dir, settings.redis_url))


def catalogue(settings: FeaturesSettings) -> list[str]:
    """Item ids of the current artifact, most popular first (what to preload)."""
    directory = artifacts.current(settings.data_dir)
    stats = pd.read_parquet(directory / "features" / "item_stats.parquet")
    return list(stats.sort_values("popularity", ascending=False)["item_id"])


async def create_server(settings: FeaturesSettings) -> Service:
    store = await asyncio.to_thread(ensure_published, settings)
    features = Features(store, settings)
    feast_dir = settings.data_dir / "feast"
    served = {"version": published_version(feast_dir, settings.redis_url)}
    records = await asyncio.to_thread(features.read_catalogue, catalogue(settings))
    features.publish_catalogue(records, served["version"] or "")

    async def online_store_answers() -> bool:
        await features.user("__health__")
        return True

    service = build_server(
        "features",
        settings,
        [
            Registration(
                FeaturesServicer(features),
                SERVICE_NAME,
                admin_methods=frozenset({"PushUserEvents"}),
                # The gateway forwards an app's events with the app's own token.
                app_methods=frozenset({"PushUserEvents"}),
            )
        ],
        probes=[DependencyProbe("online_store", online_store_answers, interval_s=2.0)],
    )

    async def watch_publishes() -> None:
        # A new artifact: publish it, and drop cached items from the old one.
        while settings.refresh_interval_s:
            await asyncio.sleep(settings.refresh_interval_s)
            try:
                await asyncio.to_thread(ensure_published, settings)
            except artifacts.ArtifactError as exc:
                log.error("cannot publish the current artifact: %s", exc)
                continue
            version = published_version(feast_dir, settings.redis_url)
            if version != served["version"]:
                await asyncio.to_thread(features.follow_registry)
                features.invalidate_items()
                records = await asyncio.to_thread(features.read_catalogue, catalogue(settings))
                features.publish_catalogue(records, version or "")
                served["version"] = version
                log.info("serving features of %s", version)

    service.run_in_background(watch_publishes)
    service.on_stop.append(features.catalogue.close)
    # Once no call can push more: the merged rows into the store.
    service.cleanups.append(features.event_writer.close)
    service.cleanups.append(features.vectors.close)
    service.domain = features
    return service
