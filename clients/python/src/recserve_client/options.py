"""What a client is configured with, and the gRPC service config made from it.

Retries live in the channel's service config, never in a loop around a call:
gRPC retries an attempt only while no response has started, counts retries
against a token bucket (``retryThrottling``) so a struggling service is not
hit harder, and stays inside the call's one deadline.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

SERVICE = "recserve.recommend.v1.RecommendService"
# The CA file a client trusts when its options name none (the stack's own
# edge certificate: <data_dir>/edge/ca.crt); unset: the system's CAs.
CA_FILE_VARIABLE = "RECSERVE_CA_FILE"
# The idempotent reads: the only methods the policy below applies to. A
# method not named here (a future write) gets no retry by default.
READ_METHODS = ("Recommend", "SimilarItems")
# A request the server refused stays refused: retrying it only adds load.
NEVER_RETRIED = frozenset(
    {
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "UNAUTHENTICATED",
        "FAILED_PRECONDITION",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "DEADLINE_EXCEEDED",
    }
)


def _duration(seconds: float) -> str:
    return f"{seconds:.3f}s"


def read_methods_config() -> dict[str, object]:
    """A method config naming the reads, to which a policy is added."""
    return {"name": [{"service": SERVICE, "method": m} for m in READ_METHODS]}


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of the read calls.

    ``attempt_timeout_s``: an attempt that has not answered by then is
    abandoned and sent again. Envoy has usually moved the call already: it
    hedges one its gateway has not answered in 0.2 s to another gateway
    (or the standby); this is for what it could not place. gRPC's C core,
    under Python, does not implement ``hedgingPolicy`` (it accepts and
    ignores it); a per-attempt timeout (``perAttemptRecvTimeout``, behind
    the ``grpc.experimental.enable_hedging`` channel argument) is the form
    of hedging it has. ``None`` turns it off: then only failed attempts
    (``retryable_codes``) are retried.
    """

    max_attempts: int = 3
    attempt_timeout_s: float | None = 0.3
    initial_backoff_s: float = 0.02
    max_backoff_s: float = 0.2
    backoff_multiplier: float = 2.0
    retryable_codes: tuple[str, ...] = ("UNAVAILABLE",)
    # Retries stop while more than half of these tokens are spent: each
    # failed or abandoned attempt takes one, each answered call gives back
    # token_ratio. At 1.0 retries go on while fewer attempts fail than
    # succeed (one hung gateway of two: each call that met it is one failure
    # and one success), and stop in an outage, where they only add load.
    # While they are stopped an attempt past attempt_timeout_s fails the
    # call (CANCELLED) instead of waiting for the deadline. Half the tokens
    # is how many failures at once are still retried: an ingress restart
    # fails every call in flight together, and at 10, 8 threads' calls lost
    # 4-8 (docs/clients.md).
    throttle_max_tokens: int = 100
    throttle_token_ratio: float = 1.0

    def __post_init__(self) -> None:
        if not 2 <= self.max_attempts <= 5:
            raise ValueError("max_attempts: 2 to 5 (gRPC caps attempts at 5)")
        refused = NEVER_RETRIED.intersection(self.retryable_codes)
        if refused:
            raise ValueError(f"retryable_codes: {sorted(refused)} must never be retried")
        if self.attempt_timeout_s is not None and self.attempt_timeout_s <= 0:
            raise ValueError("attempt_timeout_s: must be positive or None")

    def method_config(self) -> dict[str, object]:
        policy: dict[str, object] = {
            "maxAttempts": self.max_attempts,
            "initialBackoff": _duration(self.initial_backoff_s),
            "maxBackoff": _duration(self.max_backoff_s),
            "backoffMultiplier": self.backoff_multiplier,
            "retryableStatusCodes": list(self.retryable_codes),
        }
        if self.attempt_timeout_s is not None:
            policy["perAttemptRecvTimeout"] = _duration(self.attempt_timeout_s)
        return {**read_methods_config(), "retryPolicy": policy}


@dataclass(frozen=True)
class TlsOptions:
    """TLS to the ingress: the CA to trust (the system's when None), and a
    client certificate for mutual TLS."""

    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = None
    # The name to expect in the server's certificate, when it differs from
    # the target's host.
    server_name: str | None = None

    @classmethod
    def from_files(
        cls,
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
        server_name: str | None = None,
    ) -> TlsOptions:
        def read(path: str | Path | None) -> bytes | None:
            return Path(path).read_bytes() if path else None

        if (cert is None) != (key is None):
            raise ValueError("cert and key: give both or neither")
        return cls(read(ca), read(cert), read(key), server_name)

    @classmethod
    def default(cls) -> TlsOptions:
        """What a client uses off loopback when its options say nothing: the CA
        in RECSERVE_CA_FILE, else the system's."""
        return cls.from_files(ca=os.environ.get(CA_FILE_VARIABLE) or None)


@dataclass(frozen=True)
class ClientOptions:
    """Defaults for every call of one client (docs/clients.md says why)."""

    # The whole call, retries included. The service answers within about
    # 100 ms even when a stage fails (a degraded answer); Envoy caps a
    # call at 1 s.
    timeout_s: float = 1.0
    retry: RetryPolicy | None = field(default_factory=RetryPolicy)
    # None: TLS (TlsOptions.default()) to any address but loopback, which
    # gets plaintext; given: TLS with these, loopback included.
    tls: TlsOptions | None = None
    # Sent as ``authorization: Bearer <token>``; only over TLS or loopback.
    token: str | None = None
    # No TLS even off loopback (a sidecar or tunnel does it); a token is then
    # refused there.
    plaintext: bool = False
    keepalive_time_s: float = 30.0
    keepalive_timeout_s: float = 10.0
    # A read waits, within its deadline, for a connection being made again
    # (the ingress restarting: Envoy is back in about 0.2 s) instead of
    # failing at once; False: it fails at once with UNAVAILABLE.
    wait_for_ready: bool = True
    # A lost connection is tried again after this, growing to the max.
    # gRPC's own first wait is 1 s: a client failed every call for 1.2 s
    # of an Envoy restart that took 0.22 s.
    reconnect_backoff_s: float = 0.1
    max_reconnect_backoff_s: float = 1.0
    channel_options: tuple[tuple[str, str | int], ...] = ()

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError("timeout_s: must be positive")
        if self.plaintext and self.tls is not None:
            raise ValueError("plaintext and tls: one or the other")
        if not 0 < self.reconnect_backoff_s <= self.max_reconnect_backoff_s:
            raise ValueError("reconnect_backoff_s: positive, at most max_reconnect_backoff_s")

    def service_config(self) -> str:
        config: dict[str, object] = {"methodConfig": []}
        reads = read_methods_config() if self.retry is None else self.retry.method_config()
        if self.wait_for_ready:
            reads["waitForReady"] = True
        if self.retry is not None:
            config["retryThrottling"] = {
                "maxTokens": self.retry.throttle_max_tokens,
                "tokenRatio": self.retry.throttle_token_ratio,
            }
        if self.retry is not None or self.wait_for_ready:
            config["methodConfig"] = [reads]
        return json.dumps(config)
