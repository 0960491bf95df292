"""gRPC servicer of the gateway service: proto <-> domain, nothing else."""

from __future__ import annotations

from recserve.recommend.v1 import recommend_pb2_grpc


class GatewayServicer(recommend_pb2_grpc.RecommendServiceServicer):
    """RPCs not built yet answer UNIMPLEMENTED (the generated base class)."""
