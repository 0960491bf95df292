"""Server factory of the retriever service: returns an unstarted server."""

from __future__ import annotations

from recserve.retriever.v1 import retriever_pb2_grpc
from recserve_kit.server import Registration, Service, build_server
from services.retriever.config import RetrieverSettings
from services.retriever.servicer import RetrieverServicer

SERVICE_NAME = "recserve.retriever.v1.RetrieverService"


async def create_server(settings: RetrieverSettings) -> Service:
    servicer = RetrieverServicer()
    registration = Registration(
        retriever_pb2_grpc.add_RetrieverServiceServicer_to_server, servicer, SERVICE_NAME
    )
    return build_server("retriever", settings, [registration])
