"""Server factory of the gateway service: returns an unstarted server."""

from __future__ import annotations

from recserve.recommend.v1 import recommend_pb2_grpc
from recserve_kit.server import Registration, Service, build_server
from services.gateway.config import GatewaySettings
from services.gateway.servicer import GatewayServicer

SERVICE_NAME = "recserve.recommend.v1.RecommendService"


async def create_server(settings: GatewaySettings) -> Service:
    servicer = GatewayServicer()
    registration = Registration(
        recommend_pb2_grpc.add_RecommendServiceServicer_to_server, servicer, SERVICE_NAME
    )
    return build_server("gateway", settings, [registration])
