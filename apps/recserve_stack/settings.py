"""Ports and paths of the local stack, one place for all of them.

Read from RECSERVE_STACK_* variables. The services get their own settings
from these as RECSERVE_<SERVICE>_* variables (see ``components.py``), the
same names the Compose files use.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import tempfile
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from recserve_kit.transport import LOOPBACK_HOSTS
from recserve_stack.retrain_schedule import DAILY_TIME

ROOT = Path(__file__).resolve().parents[2]
STANDBY_GATEWAY = "gateway-standby"  # the standby gateway's process and socket name
STANDBY_MARK = "RECSERVE_STACK_GATEWAY_ROLE"  # in the standby's environment: "standby"
EDGE_PORT = 8443  # the TLS listener's port where `host` is not loopback
# Addresses that bind every interface: no name a certificate could carry.
ANY_ADDRESS = frozenset({"", "0.0.0.0", "::"})
# Room in a socket address after the directory for the longest name.
SOCKET_DIR_MAX = 107 - len(f"/{STANDBY_GATEWAY}.sock")


def small_host() -> bool:
    """Fewer than 4 cores: the request path in one process (one per core)."""
    return (os.cpu_count() or 1) < 4


def default_extra_gateways(one_process: bool) -> list[int]:
    """With the request path in one process, a second such process where
    there is a second core: bursts of 32 shed 0-3 answers against 10-14,
    200/s with p99 11-15 ms against 30-35, 370-377 full answers a second at
    400/s against 216-224, for the same CPU a Recommend at 50/s
    (docs/benchmarks.md, "A request-path process per core").
    Each service apart, a second gateway where there are cores for it: on two
    it cost 1.7 ms more CPU a request at 50/s and doubled p99 under 520/s of
    overload (two bounds admit twice the work; "One gateway or two")."""
    if one_process:
        return [50061] if (os.cpu_count() or 1) >= 2 else []
    return [] if small_host() else [50061]


class StackSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RECSERVE_STACK_", extra="ignore")

    host: str = Field("127.0.0.1", description="Address every component binds and calls.")
    data_dir: Path = Field(
        ROOT / "data",
        description="Artifacts, stores, certificates, keys, logs and traces of the stack.",
    )
    envoy_port: int = Field(8080, ge=1, le=65535, description="Envoy's public listener.")
    # App backends on other hosts reach the stack here, over TLS; the
    # plaintext listener above serves callers on this host (the clients send
    # tokens in plaintext to loopback only).
    edge_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Envoy's TLS listener for app backends on other hosts (the same routes "
        f"as envoy_port); 0: none; unset: {EDGE_PORT} where `host` is not a loopback "
        "address, else none.",
    )
    edge_host: str = Field(
        "", description="Address the TLS listener binds; empty: `host`; 0.0.0.0: every interface."
    )
    edge_tls_dir: Path | None = Field(
        None,
        description="Your own certificate for the TLS listener: a directory with tls.crt (the "
        "chain) and tls.key (cert-manager's names); unset: <data_dir>/edge, a pair from the "
        "stack's CA made at start (its ca.crt is what clients trust).",
    )
    edge_names: list[str] = Field(
        default_factory=list,
        description="More DNS names or IP addresses in the generated edge certificate, as "
        "JSON; it always names localhost, 127.0.0.1, this machine's host name and edge_host.",
    )
    envoy_workers: int = Field(
        0,
        ge=0,
        le=64,
        description="Envoy's worker threads (--concurrency); 0: one per core, as Envoy "
        "does by default.",
    )
    envoy_admin_port: int = Field(
        9901, ge=1, le=65535, description="Envoy's admin interface (loopback only)."
    )
    gateway_port: int = Field(50051, ge=1, le=65535, description="The first gateway's port.")
    # On two cores, five Python gRPC servers per Recommend spent most of
    # their CPU in gRPC itself (docs/benchmarks.md, "One process").
    one_process: bool = Field(
        default_factory=small_host,
        description="The gateway's process hosts the features, retriever and ranker modules "
        "and calls them in-process (`python -m services.one_process`; default on fewer "
        "than 4 cores); each module keeps its port, and each further gateway is such a "
        "process too, following the first's writers. False: each its own process, as in "
        "Compose and Kubernetes.",
    )
    # More gateway processes behind Envoy, one port each: a gateway that dies
    # is no longer the one process whose death clients see (Envoy retries on
    # the other).
    gateway_extra_ports: list[int] = Field(
        default_factory=lambda data: default_extra_gateways(data["one_process"]),
        description="Ports of more gateway processes behind Envoy, as JSON; Envoy retries "
        "a failed call on another one, so a gateway that dies costs clients no error.",
    )
    # More rankers, each its own Triton client: one writes the rollout, the
    # others follow it (services/ranker/replica.py); the gateways call the first.
    log_max_bytes: int = Field(
        64 << 20,
        ge=0,
        description="Each component's log and Envoy's access log under data_dir/logs: past "
        "this size it is renamed <name>.1 (replacing the one before), so each takes at most "
        "twice this.",
    )
    ranker_extra_ports: list[int] = Field(
        default_factory=list,
        description="Ports of more ranker processes sharing the rollout, as JSON (the "
        "gateways call the first; the others answer direct calls and forwarded actions).",
    )
    # Where no second gateway serves (one core, or each service apart on
    # two), a standby: Envoy sends it nothing while the others are healthy
    # (priority 1), and a call whose gateway died is retried there.
    gateway_standby_port: int = Field(
        default_factory=lambda data: 0 if data["gateway_extra_ports"] else 50062,
        ge=0,
        le=65535,
        description="A standby gateway on this port (0: none; default where no extra gateway "
        "runs): "
        "Envoy's failover (priority 1), sent retries and traffic only while no other "
        "gateway is healthy.",
    )
    gateway_canary_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="A canary gateway process on this port (0: none), Envoy's gateway_canary "
        "cluster; driven by `python -m recserve_stack canary`.",
    )
    gateway_canary_env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment of the canary gateway over the others' (what its build "
        'changes), as JSON: {"RECSERVE_GATEWAY_RANK_MS": "20"}.',
    )
    features_port: int = Field(50052, ge=1, le=65535, description="The features service's port.")
    retriever_port: int = Field(50053, ge=1, le=65535, description="The retriever's port.")
    ranker_port: int = Field(50054, ge=1, le=65535, description="The ranker's port.")
    triton_http_port: int = Field(
        8000, ge=1, le=65535, description="Triton's HTTP port; off when tls is on."
    )
    triton_grpc_port: int = Field(8001, ge=1, le=65535, description="Triton's gRPC port.")
    triton_metrics_port: int = Field(
        8002, ge=1, le=65535, description="Triton's Prometheus /metrics port."
    )
    # Prometheus /metrics of the services: gateway, features, retriever, ranker.
    metrics_base_port: int = Field(
        9101,
        ge=1,
        le=65500,
        description="/metrics of the gateway; features, retriever and ranker take the next "
        "three ports, extra gateways the ones after.",
    )
    rate_limit_per_second: int = Field(
        2000, ge=1, description="Envoy's local rate limit for the public listener."
    )
    trace_sample_ratio: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Share of requests traced (Envoy, or the gateway without a collector); "
        "OTEL_TRACES_SAMPLER, when set, wins for the services.",
    )
    tls: bool = Field(
        True,
        description="Mutual TLS on every internal port (certificates from a local CA in "
        "<data_dir>/tls). False: plaintext on loopback, only to measure what TLS costs.",
    )
    unix_sockets: bool = Field(
        True,
        description="Internal hops between the stack's processes over Unix sockets in a "
        "directory only this user can open, with local credentials instead of TLS (one "
        "host). The TCP ports stay, with mutual TLS, for tools and other hosts.",
    )
    triton_venv: Path = Field(
        ROOT / ".venv-triton",
        description="Triton's own environment (nvidia-pytriton pins numpy<2, Feast needs 2).",
    )
    # Triton model repository; the pipeline generates it under the data dir.
    triton_repository: Path | None = Field(
        None, description="Triton's model repository; unset: <data_dir>/triton/repository."
    )
    triton_models: list[str] = Field(
        default_factory=lambda: ["user_tower", "ranker", "item_tower"],
        description="Models Triton loads at start, as JSON.",
    )
    triton_config_name: str = Field(
        "",
        description="Triton's --model-config-name (gpu: configs/gpu.pbtxt); empty: config.pbtxt.",
    )
    python: Path = Field(Path(sys.executable), description="Interpreter that runs the services.")
    start_timeout_s: float = Field(
        120.0,
        gt=0,
        description="The whole stack (or a restarted component) must be ready within this long.",
    )
    stop_timeout_s: float = Field(
        15.0,
        gt=0,
        description="After SIGTERM the components get this long, together, before SIGKILL.",
    )

    admin_token_file: Path | None = Field(
        None,
        description="The admin token that `rollout`, `canary` and `retrain` send; unset: "
        "<data_dir>/auth/admin.token (on Kubernetes, a Secret's mount).",
    )
    retrain_at: str = Field(
        "",
        pattern=f"^$|^{DAILY_TIME}$",
        description="The local runner runs `recserve-stack retrain` every day at this time "
        "(UTC, HH:MM or HH:MM:SS); empty: never.",
    )
    retrain_baseline_rate: float = Field(
        0.1,
        gt=0,
        lt=1,
        description="The scheduled retrain's guardrail: the stable's conversion, about.",
    )
    retrain_min_drop: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="The scheduled retrain's guardrail: the relative drop it rules out.",
    )

    @property
    def admin_token_path(self) -> Path:
        return self.admin_token_file or self.data_dir / "auth" / "admin.token"

    @property
    def edge_listen_port(self) -> int:
        """The TLS listener's port, 0 for none."""
        if self.edge_port is not None:
            return self.edge_port
        return 0 if self.host in LOOPBACK_HOSTS or self.host.startswith("127.") else EDGE_PORT

    @property
    def edge_listen_host(self) -> str:
        return self.edge_host or self.host

    @property
    def edge_dir(self) -> Path:
        """Where the TLS listener's tls.crt and tls.key are."""
        return self.edge_tls_dir or self.data_dir / "edge"

    @property
    def edge_certificate_names(self) -> list[str]:
        """The names the generated edge certificate carries, in order, once each."""
        names = ["localhost", "127.0.0.1", socket.gethostname()]
        for host in (self.edge_listen_host, self.host):
            if host not in ANY_ADDRESS:
                names.append(host)
        return list(dict.fromkeys([*names, *self.edge_names]))

    @property
    def repository(self) -> Path:
        return self.triton_repository or self.data_dir / "triton" / "repository"

    @property
    def tls_dir(self) -> Path:
        return self.data_dir / "tls"

    @property
    def socket_dir(self) -> Path:
        """<data_dir>/sockets, or a short directory of /tmp named after the data
        dir where that path would not fit a socket address (108 bytes)."""
        local = self.data_dir / "sockets"
        if len(str(local)) <= SOCKET_DIR_MAX:
            return local
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"recserve-{digest}"

    def socket(self, name: str) -> Path:
        return self.socket_dir / f"{name}.sock"

    @property
    def gateway_ports(self) -> list[int]:
        return [self.gateway_port, *self.gateway_extra_ports]

    @property
    def gateway_names(self) -> list[str]:
        """The process name of each of ``gateway_ports``."""
        return ["gateway", *(f"gateway-{n}" for n in range(2, len(self.gateway_ports) + 1))]

    def metrics_port(self, service: str, replica: int = 0) -> int:
        """Replica 0 of each service, then the extra gateways after the four."""
        order = ["gateway", "features", "retriever", "ranker"]
        if replica:
            return self.metrics_base_port + len(order) - 1 + replica
        return self.metrics_base_port + order.index(service)
