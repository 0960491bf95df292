"""gRPC servicer of the ranker service: proto <-> domain, nothing else."""

from __future__ import annotations

from recserve.ranker.v1 import ranker_pb2_grpc


class RankerServicer(ranker_pb2_grpc.RankerServiceServicer):
    """RPCs not built yet answer UNIMPLEMENTED (the generated base class)."""
