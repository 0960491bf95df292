"""gRPC servicer of the features service: proto <-> domain, nothing else."""

from __future__ import annotations

from recserve.features.v1 import features_pb2_grpc


class FeaturesServicer(features_pb2_grpc.FeatureServiceServicer):
    """RPCs not built yet answer UNIMPLEMENTED (the generated base class)."""
