"""Server factory of the features service: returns an unstarted server."""

from __future__ import annotations

from recserve.features.v1 import features_pb2_grpc
from recserve_kit.server import Registration, Service, build_server
from services.features.config import FeaturesSettings
from services.features.servicer import FeaturesServicer

SERVICE_NAME = "recserve.features.v1.FeatureService"


async def create_server(settings: FeaturesSettings) -> Service:
    servicer = FeaturesServicer()
    registration = Registration(
        features_pb2_grpc.add_FeatureServiceServicer_to_server, servicer, SERVICE_NAME
    )
    return build_server("features", settings, [registration])
