"""`python -m recserve_kit.healthcheck ADDRESS [SERVICE] [--tls-dir DIR]`:
exit 0 when SERVING.

The container healthcheck: a real grpc.health.v1 Check, so a process that
accepts TCP but is not ready (model not loaded, dependency down) is unhealthy.
With ``--tls-dir`` it calls with the operator's certificate of the stack's CA
(the ports take nothing else).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from recserve_kit import transport
from recserve_kit.transport import Tls


def check(address: str, service: str = "", timeout_s: float = 2.0, tls: Tls | None = None) -> bool:
    with transport.channel(address, tls) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m recserve_kit.healthcheck")
    parser.add_argument("address")
    parser.add_argument("service", nargs="?", default="")
    parser.add_argument("--tls-dir", type=Path, help="the stack's certificates (mutual TLS)")
    args = parser.parse_args(argv)
    tls = Tls.load(args.tls_dir, "operator") if args.tls_dir else None
    return 0 if check(args.address, args.service, tls=tls) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
