"""One way to open a port and a channel: mutual TLS when the stack's
certificates are configured, plaintext on loopback otherwise, and a Unix
socket with local credentials between processes of one host.

With ``Tls`` every server demands a client certificate signed by the stack's
CA and every channel presents its own, so an internal port answers only the
stack's own components, never another local process. Plaintext is for in-process
tests and debugging: ``ServiceSettings`` refuses it on any address other than
loopback.

A ``unix:`` address is a socket in a directory only the stack's user can
open (mode 0700, checked at bind): the file system decides who may connect,
so the hop needs no encryption. On one host this saves the TLS record work
of every call (docs/benchmarks.md, "One host: Unix sockets").
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

UNIX = "unix:"
# sockaddr_un's sun_path holds 108 bytes with the terminating NUL.
MAX_SOCKET_PATH = 107

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
# A peer that comes back (or starts after its client) is used again within
# a second, not after gRPC's default backoff, which grows toward two minutes.
FAST_RECONNECT: list[tuple[str, Any]] = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
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


def socket_dir_problem(directory: Path) -> str | None:
    """Why ``directory`` may not hold the stack's sockets, or None."""
    if not directory.is_dir():
        return f"{directory} is not a directory"
    mode = directory.stat().st_mode & 0o777
    if mode & 0o077:
        return f"{directory} is open to other users (mode {mode:o}; the stack's sockets need 700)"
    if directory.stat().st_uid != os.getuid():
        return f"{directory} belongs to another user"
    return None


def unix_listener(path: Path) -> str:
    """The ``unix:`` address to bind at ``path``: its directory made (0700) or
    checked, a socket left by an earlier process removed."""
    if len(str(path)) > MAX_SOCKET_PATH:
        raise ValueError(f"socket path {path} is longer than {MAX_SOCKET_PATH} bytes")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    problem = socket_dir_problem(path.parent)
    if problem:
        raise PermissionError(f"cannot listen on {path}: {problem}")
    if path.is_socket():
        path.unlink()
    return UNIX + str(path)


def local_credentials() -> tuple[grpc.ServerCredentials, grpc.ChannelCredentials]:
    kind = grpc.LocalConnectionType.UDS
    return grpc.local_server_credentials(kind), grpc.local_channel_credentials(kind)


def bind(server: grpc.aio.Server, address: str, tls: Tls | None) -> int:
    if address.startswith(UNIX):
        return server.add_secure_port(address, local_credentials()[0])
    if tls is None:
        return server.add_insecure_port(address)
    return server.add_secure_port(address, tls.server_credentials())


def aio_channel(
    address: str, tls: Tls | None, options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Channel:
    if address.startswith(UNIX):
        return grpc.aio.secure_channel(address, local_credentials()[1], options=options)
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(address, tls.channel_credentials(), options=options)


def channel(address: str, tls: Tls | None, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
    """A blocking channel (health checks, tools, tests)."""
    if address.startswith(UNIX):
        return grpc.secure_channel(address, local_credentials()[1], options=options)
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, tls.channel_credentials(), options=options)
