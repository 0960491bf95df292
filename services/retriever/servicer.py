"""gRPC servicer of the retriever service: proto <-> domain, nothing else."""

from __future__ import annotations

from recserve.retriever.v1 import retriever_pb2_grpc


class RetrieverServicer(retriever_pb2_grpc.RetrieverServiceServicer):
    """RPCs not built yet answer UNIMPLEMENTED (the generated base class)."""
