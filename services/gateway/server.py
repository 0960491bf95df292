"""Server factory of the gateway service: returns an unstarted server."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping

import grpc

from recserve.features.v1 import features_pb2_grpc
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve.retriever.v1 import retriever_pb2_grpc
from recserve_kit import transport
from recserve_kit.call_stream import CallStream
from recserve_kit.clients import Client, client
from recserve_kit.health import DependencyProbe, serving
from recserve_kit.item_watch import ItemWatch
from recserve_kit.jsonl_log import JsonlLog
from recserve_kit.local_calls import LocalCalls
from recserve_kit.server import Registration, Service, build_server
from recserve_model.artifacts import ArtifactError
from services.gateway.backends import CARRIED
from services.gateway.config import GatewaySettings
from services.gateway.descriptions import ItemDescriptions
from services.gateway.domain import Gateway
from services.gateway.events import EventLog, EventServicer
from services.gateway.impressions import Impressions, RolloutArms
from services.gateway.online_updates import OnlineUpdates
from services.gateway.popular import PopularItems
from services.gateway.segment_lists import SegmentLists
from services.gateway.servicer import GatewayServicer

SERVICE_NAME = "recserve.recommend.v1.RecommendService"
EVENTS_SERVICE = "recserve.recommend.v1.EventService"
log = logging.getLogger(__name__)

# Keepalive through the channel's options; no retries here: inside a 100 ms
# budget the fallback is the better answer, and Envoy retries at the edge.
CHANNEL_OPTIONS = [*transport.CLIENT_KEEPALIVE, *transport.FAST_RECONNECT]


# The request path's calls (``backends.CARRIED``) go as frames on held
# streams per backend (recserve_kit.call_stream): against a unary call each,
# 1.5 ms less CPU per Recommend at 50/s and as many full answers at 200/s
# (docs/benchmarks.md, "The request path's switches, settled").
CALL_STREAMS = 4
STUBS = {
    "features": features_pb2_grpc.FeatureServiceStub,
    "retriever": retriever_pb2_grpc.RetrieverServiceStub,
    "ranker": ranker_pb2_grpc.RankerServiceStub,
}


def clients(
    channels: dict[str, grpc.aio.Channel], hosted: Mapping[str, Service] | None = None
) -> tuple[dict[str, Client], list[CallStream]]:
    """The backends' clients. Their request-path methods run the handlers
    of a backend ``hosted`` in this process directly (``LocalCalls``), or
    go on ``CALL_STREAMS`` held streams (returned, to close)."""
    hosted = hosted or {}
    made, streams = {}, []
    for name, (service, methods) in CARRIED.items():
        calls: CallStream | LocalCalls
        if name in hosted:
            handlers = hosted[name].frames
            assert handlers is not None
            calls = LocalCalls(handlers.handlers)
        else:
            calls = CallStream(channels[name], CALL_STREAMS)
            streams.append(calls)
        made[name] = client(STUBS[name], channels[name], service, calls, methods)
    return made, streams


def create_gateway(
    settings: GatewaySettings,
    channels: dict[str, grpc.aio.Channel],
    hosted: Mapping[str, Service] | None = None,
) -> tuple[Gateway, ItemWatch, list[CallStream]]:
    """The domain with its local copies loaded: fallback lists, segment lists,
    and the catalogue copy the returned watch keeps live."""
    popular = PopularItems(settings.data_dir)
    popular.reload()
    segments = SegmentLists(settings.data_dir)
    segments.reload()
    descriptions = ItemDescriptions()
    watch = ItemWatch(channels["features"], descriptions.replace, descriptions.update)
    made, streams = clients(channels, hosted)
    gateway = Gateway(
        settings, made["features"], made["retriever"], made["ranker"], popular, descriptions,
        segments,
    )  # fmt: skip
    return gateway, watch, streams


def recorders(settings: GatewaySettings) -> tuple[Impressions, EventLog]:
    """What answers showed, and what app backends say users did, under data_dir/events."""
    impressions = Impressions(
        JsonlLog(
            settings.data_dir / "events" / "impressions",
            settings.impression_queue,
            keep_days=settings.impressions_keep_days,
        )
        if settings.impressions
        else None,
        RolloutArms(settings.data_dir),
    )
    impressions.arms.reload()
    return impressions, EventLog(settings.data_dir / "events" / "app")


def backend_channels(settings: GatewaySettings) -> dict[str, grpc.aio.Channel]:
    return {
        name: transport.aio_channel(address, settings.tls("gateway"), CHANNEL_OPTIONS)
        for name, address in (
            ("features", settings.features_addr),
            ("retriever", settings.retriever_addr),
            ("ranker", settings.ranker_addr),
        )
    }


def dependency_probes(
    popular: PopularItems,
    watch: ItemWatch,
    channels: Mapping[str, grpc.aio.Channel],
    hosted: Mapping[str, Service] | None = None,
) -> list[DependencyProbe]:
    async def fallback_loaded() -> bool:
        return popular.loaded

    def backend_probe(name: str, channel: grpc.aio.Channel) -> DependencyProbe:
        # Reported per backend, but the gateway stays SERVING without them:
        # it answers from the fallback, marked degraded. A backend hosted in
        # this process is the one its calls reach (a follower's, not the
        # first process's at the address), asked in-process.
        module = (hosted or {}).get(name)
        if module is None:
            return DependencyProbe(name, functools.partial(serving, channel), 1.0, required=False)

        async def module_serving() -> bool:
            return module.health.serving

        return DependencyProbe(name, module_serving, 1.0, required=False)

    return [
        DependencyProbe("fallback", fallback_loaded, interval_s=1.0),
        # Titles for answers; without it they are fetched per answer instead.
        DependencyProbe("item_catalogue", watch.healthy, interval_s=1.0, required=False),
    ] + [backend_probe(name, channel) for name, channel in channels.items()]


async def create_server(
    settings: GatewaySettings, hosted: Mapping[str, Service] | None = None
) -> Service:
    """The gateway; ``hosted``: backends served by this same process
    (``services.one_process``), whose request-path calls stay in it."""
    channels = backend_channels(settings)
    gateway, watch, streams = create_gateway(settings, channels, hosted)
    popular, segments = gateway.degrade.popular, gateway.degrade.segments
    probes = dependency_probes(popular, watch, channels, hosted)
    impressions, event_log = recorders(settings)
    # The events API counts each event under the lists this gateway showed.
    events = EventServicer(
        event_log,
        gateway.catalogue.schema,
        OnlineUpdates(gateway.backends.features, max_queued=settings.live_update_queue),
        impressions.outcomes,
    )
    registrations = [
        Registration(GatewayServicer(gateway, impressions), SERVICE_NAME),
        Registration(events, EVENTS_SERVICE, app_methods=frozenset({"PushEvents"})),
    ]
    service = build_server("gateway", settings, registrations, probes=probes)

    async def reload_lists() -> None:
        while settings.fallback_refresh_s:
            await asyncio.sleep(settings.fallback_refresh_s)
            try:
                # In a thread: a new artifact is verified first (gigabytes
                # for a large catalogue); the lists swap in whole.
                await asyncio.to_thread(popular.reload)
                impressions.arms.reload()
                if segments is not None:
                    await asyncio.to_thread(segments.reload)
            except (OSError, ValueError, KeyError, ArtifactError) as exc:
                log.error("keeping the previous fallback lists: %s", exc)

    async def close_channels() -> None:
        for stream in streams:
            stream.close()
        for channel in channels.values():
            await channel.close()
        impressions.close()  # what is queued is written
        event_log.close()

    service.run_in_background(reload_lists)
    service.run_in_background(watch.run)
    service.cleanups.append(close_channels)
    service.domain = gateway
    return service
