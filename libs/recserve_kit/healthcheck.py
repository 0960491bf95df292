"""`python -m recserve_kit.healthcheck ADDRESS [SERVICE]`: exit 0 when SERVING.

The container healthcheck: a real grpc.health.v1 Check, so a process that
accepts TCP but is not ready (model not loaded, dependency down) is unhealthy.
"""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(address: str, service: str = "", timeout_s: float = 2.0) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print("usage: python -m recserve_kit.healthcheck ADDRESS [SERVICE]", file=sys.stderr)
        return 2
    return 0 if check(argv[0], argv[1] if len(argv) > 1 else "") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
