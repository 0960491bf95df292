"""One way to open a port and a channel: mutual TLS when the stack's
certificates are configured, plaintext on loopback otherwise.

With ``Tls`` every server demands a client certificate signed by the stack's
CA and every channel presents its own, so an internal port answers only the
stack's own components, never another local process. Plaintext is for in-process
tests and debugging: ``ServiceSettings`` refuses it on any address other than
loopback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
# Triton's model-control APIs (load, unload, repository index, shared memory,
# trace and log settings) answer only requests carrying this header with the
# secret from the TLS dir: the ranker holds it, other callers of the stack
# reach inference and health only (tritonserver --grpc-restricted-protocol).
TRITON_CONTROL_HEADER = "recserve-triton-control"
TRITON_CONTROL_SECRET = "triton-control.secret"


def triton_control_headers(tls_dir: Path | None) -> dict[str, str] | None:
    if tls_dir is None:
        return None
    # Triton prefixes the configured key for gRPC (measured: it answers
    # "expecting header 'triton-grpc-protocol-<key>'").
    secret = (tls_dir / TRITON_CONTROL_SECRET).read_text().strip()
    return {f"triton-grpc-protocol-{TRITON_CONTROL_HEADER}": secret}


@dataclass(frozen=True)
class Tls:
    """The CA, and one component's certificate and key, as PEM bytes."""

    ca: bytes
    cert: bytes
    key: bytes

    @classmethod
    def load(cls, tls_dir: Path, identity: str) -> Tls:
        files = [tls_dir / "ca.pem", tls_dir / f"{identity}.pem", tls_dir / f"{identity}.key"]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(
                f"TLS files missing: {', '.join(missing)} (made at setup: make setup)"
            )
        ca, cert, key = (f.read_bytes() for f in files)
        return cls(ca, cert, key)

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.ca, require_client_auth=True
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self.ca, self.key, self.cert)


# Keepalive that both ends agree on. Clients ping every 10 s, idle or not,
# so a dead peer is found before a request needs it; servers take a ping
# every 5 s without data, any number of them. gRPC's defaults disagree: a
# server answers the third idle ping within 5 minutes with GOAWAY
# too_many_pings, and the next call after a quiet spell pays a reconnect.
KEEPALIVE_TIME_MS = 10_000
KEEPALIVE_TIMEOUT_MS = 5_000
MIN_RECV_PING_INTERVAL_MS = 5_000
CLIENT_KEEPALIVE: list[tuple[str, Any]] = [
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
SERVER_KEEPALIVE: list[tuple[str, Any]] = [
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", MIN_RECV_PING_INTERVAL_MS),
    ("grpc.http2.max_ping_strikes", 0),
]
# The same terms for Triton's gRPC server (its command-line flags).
TRITON_KEEPALIVE_FLAGS = [
    "--grpc-keepalive-permit-without-calls=1",
    f"--grpc-http2-min-recv-ping-interval-without-data={MIN_RECV_PING_INTERVAL_MS}",
    "--grpc-http2-max-ping-strikes=0",
]


def bind(server: grpc.aio.Server, address: str, tls: Tls | None) -> int:
    if tls is None:
        return server.add_insecure_port(address)
    return server.add_secure_port(address, tls.server_credentials())


def aio_channel(
    address: str, tls: Tls | None, options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Channel:
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(address, tls.channel_credentials(), options=options)


def channel(address: str, tls: Tls | None, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
    """A blocking channel (health checks, tools, tests)."""
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, tls.channel_credentials(), options=options)
