"""Server factory of the ranker service: returns an unstarted server."""

from __future__ import annotations

from recserve.ranker.v1 import ranker_pb2_grpc
from recserve_kit.server import Registration, Service, build_server
from services.ranker.config import RankerSettings
from services.ranker.servicer import RankerServicer

SERVICE_NAME = "recserve.ranker.v1.RankerService"


async def create_server(settings: RankerSettings) -> Service:
    servicer = RankerServicer()
    registration = Registration(
        ranker_pb2_grpc.add_RankerServiceServicer_to_server, servicer, SERVICE_NAME
    )
    return build_server("ranker", settings, [registration])
