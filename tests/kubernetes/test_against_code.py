"""The manifests held to the code, as tests/integration/test_compose.py holds
Compose: every RECSERVE_* variable is a setting its service reads and
validates, with Compose's value; ports, probes, Services, addresses and
Envoy's clusters agree; the configs are the Compose ones."""

from __future__ import annotations

import asyncio
import json
import re
import shlex

import grpc
import pytest
import yaml
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from recserve_kit import healthcheck
from recserve_kit.config import env_name
from recserve_kit.transport import Tls, bind
from recserve_stack import envoy, pki
from recserve_stack.components import service_environment
from recserve_stack.settings import StackSettings
from services.features.config import FeaturesSettings
from services.gateway.config import GatewaySettings
from services.ranker.config import RankerSettings
from services.retriever.config import RetrieverSettings
from tests.kubernetes.manifests import (
    K8S,
    OVERLAYS,
    ROOT,
    SERVICES,
    compose,
    container,
    env,
    objects,
    of_kind,
    pod,
    reach,
)

SETTINGS = {
    "gateway": GatewaySettings,
    "features": FeaturesSettings,
    "retriever": RetrieverSettings,
    "ranker": RankerSettings,
}
# Where Kubernetes differs from Compose on purpose: certificates come from
# each service's own Secret, not the shared data volume.
MOUNTED = {"TLS_DIR": "/var/run/recserve/tls", "ADMIN_JWKS": "/var/run/recserve/auth/jwks.json"}
# And settings Compose leaves at their defaults: several retrievers must not
# each load a generation into the one Qdrant; the init Job loads it. Each
# ranker states the address its peers forward rollout calls to: its pod IP
# (POD_IP, from the downward API; test_ranker_replicas.py).
ONLY_HERE = {
    "retriever": {"RECSERVE_RETRIEVER_REFRESH_INTERVAL_S": "0"},
    "ranker": {"RECSERVE_RANKER_ADVERTISE_ADDR": "$(POD_IP):50054"},
}


@pytest.fixture(scope="module", params=OVERLAYS)
def docs(request):
    return objects(request.param)


@pytest.mark.parametrize("service", SERVICES)
def test_variables_are_settings_the_service_reads_with_composes_values(service, monkeypatch):
    settings_cls = SETTINGS[service]
    for overlay in OVERLAYS:
        ours = env(container(objects(overlay), service))
        recserve = {k: v for k, v in ours.items() if k.startswith("RECSERVE_")}
        known = {env_name(settings_cls, f) for f in settings_cls.model_fields}
        assert set(recserve) <= known, set(recserve) - known
        theirs = {k: str(v) for k, v in compose()[service]["environment"].items()}
        only_here = ONLY_HERE.get(service, {})
        assert {k: ours[k] for k in only_here} == only_here
        assert set(ours) - {"OTEL_EXPORTER_OTLP_ENDPOINT", *only_here} == set(theirs), overlay
        for key, value in theirs.items():
            suffix = key.removeprefix(f"RECSERVE_{service.upper()}_")
            assert ours[key] == MOUNTED.get(suffix, value), key
    # The local runner sets the same variables (only the values differ)
    # when its hops are TCP, as here (on one host it adds the sockets).
    local = {
        k
        for k in service_environment(StackSettings(unix_sockets=False))
        if k.startswith(f"RECSERVE_{service.upper()}_")
    }
    assert local <= set(recserve), local - set(recserve)
    for key, value in recserve.items():
        monkeypatch.setenv(key, value)
    settings = settings_cls()  # every value validates
    assert settings.host == "0.0.0.0" and str(settings.data_dir) == "/data"


def test_a_variable_no_setting_reads_is_caught():
    known = {env_name(GatewaySettings, f) for f in GatewaySettings.model_fields}
    assert "RECSERVE_GATEWAY_FEATURE_ADDR" not in known  # a typo of FEATURES_ADDR


@pytest.mark.parametrize("service", SERVICES)
def test_ports_probes_and_services_agree(docs, service):
    c = container(docs, service)
    variables = env(c)
    prefix = f"RECSERVE_{service.upper()}_"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {
        "grpc": int(variables[prefix + "PORT"]),
        "metrics": int(variables[prefix + "METRICS_PORT"]),
    }
    # Readiness: grpc.health.v1 through the service's own TLS port, with the
    # pod's own certificate projected as the health check's `operator`.
    command = c["readinessProbe"]["exec"]["command"]
    assert command[:4] == ["python", "-m", "recserve_kit.healthcheck", f"127.0.0.1:{ports['grpc']}"]
    assert command[4] == "--tls-dir"
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod(docs, service).spec["volumes"]}
    probe = volumes[mounts[command[5]]]["secret"]
    assert probe["secretName"] == f"recserve-tls-{service}"
    assert {i["key"]: i["path"] for i in probe["items"]} == {
        "ca.pem": "ca.pem",
        f"{service}.pem": "operator.pem",
        f"{service}.key": "operator.key",
    }
    tls = volumes[mounts[variables[prefix + "TLS_DIR"]]]["secret"]
    assert tls["secretName"] == f"recserve-tls-{service}"
    jwks_dir, _, jwks_file = variables[prefix + "ADMIN_JWKS"].rpartition("/")
    assert (
        volumes[mounts[jwks_dir]]["secret"]["secretName"] == "recserve-jwks"
        and jwks_file == "jwks.json"
    )
    # Liveness and startup ask only whether the port is open: a dependency
    # that is down makes a pod unready, never restarts it.
    assert c["livenessProbe"]["tcpSocket"]["port"] == "grpc"
    assert c["startupProbe"]["tcpSocket"]["port"] == "grpc"
    compose_test = compose()[service]["healthcheck"]["test"]
    assert compose_test[1:5] == command[:4], "the same check as Compose's healthcheck"
    service_object = of_kind(docs, "Service")[service]
    assert service_object["spec"]["clusterIP"] == "None", "headless: every pod in DNS"
    assert reach(docs, service, ports["grpc"]) == (service, ports["grpc"])
    assert (
        mounts["/data"] == "data"
        and volumes["data"]["persistentVolumeClaim"]["claimName"] == "recserve-data"
    )


def test_addresses_lead_to_the_services_they_name(docs):
    gateway = env(container(docs, "gateway"))
    for backend in ("features", "retriever", "ranker"):
        host, port = gateway[f"RECSERVE_GATEWAY_{backend.upper()}_ADDR"].split(":")
        port_env = f"RECSERVE_{backend.upper()}_PORT"
        assert reach(docs, host, int(port)) == (
            backend,
            int(env(container(docs, backend))[port_env]),
        )
    ranker = env(container(docs, "ranker"))
    host, port = ranker["RECSERVE_RANKER_TRITON_URL"].split(":")
    assert reach(docs, host, int(port)) == ("triton", 8001)
    metrics = re.fullmatch(
        r"http://([\w-]+):(\d+)/metrics", ranker["RECSERVE_RANKER_TRITON_METRICS_URL"]
    )
    assert metrics and reach(docs, metrics[1], int(metrics[2])) == ("triton", 8002)
    host, port = ranker["RECSERVE_RANKER_FEATURES_ADDR"].split(":")
    assert reach(docs, host, int(port))[0] == "features"
    redis = env(container(docs, "features"))["RECSERVE_FEATURES_REDIS_URL"]
    assert reach(docs, "redis", 6379) == ("redis", 6379) and redis == "redis://redis:6379/0"
    qdrant = env(container(docs, "retriever"))["RECSERVE_RETRIEVER_QDRANT_URL"]
    assert qdrant == "http://qdrant:6333"
    # qdrant-client with prefer_grpc uses the REST port + 1 on the same host.
    assert reach(docs, "qdrant", 6333) == ("qdrant", 6333)
    assert reach(docs, "qdrant", 6334) == ("qdrant", 6334)
    init = " ".join(
        " ".join(c["command"]) for c in pod(docs, "recserve-init").spec["initContainers"]
    )
    nightly = " ".join(container(docs, "rescore")["args"])
    assert f"--redis-url {redis}" in init and f"--redis-url={redis}" in nightly
    # The Job loads the generation the retrievers open (the same server and,
    # on the shared volume, the same state file).
    assert f"--qdrant-url {qdrant}" in init
    assert env(container(docs, "retriever"))["RECSERVE_RETRIEVER_REFRESH_INTERVAL_S"] == "0"


def clusters(config: dict) -> dict[str, tuple[str, str, int]]:
    out = {}
    for cluster in config["static_resources"]["clusters"]:
        endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
        socket = endpoint["endpoint"]["address"]["socket_address"]
        out[cluster["name"]] = (cluster["type"], socket["address"], socket["port_value"])
    return out


def test_envoys_clusters_are_headless_services_with_those_ports(docs):
    """The Envoy image carries the Compose config; in Kubernetes its short
    names resolve inside the namespace, to every ready pod of a headless Service."""
    dockerfile = (ROOT / "infra" / "envoy" / "Dockerfile").read_text()
    assert "COPY infra/compose/envoy.yaml /etc/envoy/envoy.yaml" in dockerfile
    config = yaml.safe_load(envoy.COMPOSE_CONFIG.read_text())
    services = of_kind(docs, "Service")
    for name, (kind, host, port) in clusters(config).items():
        if name == "gateway_canary":
            # A canary build beside the gateway: absent until one is deployed
            # (as in Compose without its profile); weight 0 meanwhile.
            assert host not in services
            continue
        assert kind == "STRICT_DNS", name
        target, _ = reach(docs, host, port)
        if target in SERVICES:
            assert services[host]["spec"].get("clusterIP") == "None", f"{host}: not headless"
    c = container(docs, "envoy")
    assert c["args"][:3] == ["envoy", "-c", "/etc/envoy/envoy.yaml"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod(docs, "envoy").spec["volumes"]}
    # The config and the edge listener's SDS file beside it in the image.
    assert f"COPY infra/compose/edge-sds.yaml {envoy.COMPOSE_SDS}" in dockerfile
    text = envoy.COMPOSE_CONFIG.read_text() + envoy.COMPOSE_SDS_CONFIG.read_text()
    secrets = {"/data/auth": "recserve-jwks", "/data/tls": "recserve-tls-envoy"}
    secrets[envoy.COMPOSE_EDGE_DIR] = "recserve-edge-tls"  # kubernetes.io/tls, cert-manager's
    for path in re.findall(r"filename: (/data/[\w/.-]+)", text):
        directory, _, file = path.rpartition("/")
        secret = volumes[mounts[directory]]["secret"]
        assert secret["secretName"] == secrets[directory], path
        assert file in {i["path"] for i in secret.get("items", [])} or "items" not in secret, path
    # The whole Secret at the directory Envoy watches (a subPath mount would
    # never see the kubelet's ..data swap, so a renewal would not reach Envoy).
    assert f"watched_directory: {{ path: {envoy.COMPOSE_EDGE_DIR} }}" in text
    (edge_mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == envoy.COMPOSE_EDGE_DIR]
    assert "subPath" not in edge_mount
    runtime = volumes[mounts[envoy.COMPOSE_RUNTIME]]["configMap"]
    assert runtime["items"] == [{"key": "random_sampling", "path": "tracing/random_sampling"}]
    public, edge = config["static_resources"]["listeners"]
    assert c["ports"] == [
        {"name": name, "containerPort": listener["address"]["socket_address"]["port_value"]}
        for name, listener in (("http", public), ("https", edge))
    ]
    edge_tls = edge["filter_chains"][0]["transport_socket"]["typed_config"]
    assert edge_tls["@type"].endswith("DownstreamTlsContext")


def test_envoy_samples_the_share_the_sizing_was_measured_with():
    value = (K8S / "base" / "config" / "random_sampling").read_text().strip()
    assert int(value) == round(StackSettings().trace_sample_ratio * 10000)  # units of 0.01%


def test_telemetry_endpoints_and_configs_are_composes(docs):
    for name in SERVICES:
        assert (
            env(container(docs, name))["OTEL_EXPORTER_OTLP_ENDPOINT"]
            == "http://otel-collector:4317"
        )
    assert reach(docs, "otel-collector", 4317) == ("otel-collector", 4317)
    extra = env(container(docs, "triton"))["TRITON_EXTRA_ARGS"]
    overlay_args = compose_overlay("compose.observability.yaml")["triton"]["environment"][
        "TRITON_EXTRA_ARGS"
    ]
    assert shlex.split(extra) == shlex.split(overlay_args)
    assert reach(docs, "otel-collector", 4318) == ("otel-collector", 4318)
    observability, grafana = "components/observability/config", "infra/grafana"
    copies = {
        "base/config/collector.yaml": "infra/otel/collector.yaml",
        "base/config/tempo.yaml": "infra/tempo/tempo.yaml",
        f"{observability}/datasources.yaml": f"{grafana}/provisioning/datasources/datasources.yaml",
        f"{observability}/dashboards.yaml": f"{grafana}/provisioning/dashboards/dashboards.yaml",
        f"{observability}/recserve-latency.json": f"{grafana}/dashboards/recserve-latency.json",
    }
    for copy, original in copies.items():
        assert (K8S / copy).read_text() == (ROOT / original).read_text(), (
            f"cp {original} infra/kubernetes/{copy}"
        )
    collector = yaml.safe_load((K8S / "base" / "config" / "collector.yaml").read_text())
    host, port = collector["exporters"]["otlp/tempo"]["endpoint"].split(":")
    assert reach(docs, host, int(port)) == ("tempo", 4317)
    exported = int(collector["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1])
    ports = {p["name"]: p["containerPort"] for p in container(docs, "otel-collector")["ports"]}
    assert (
        ports["metrics"] == exported and ports["otlp-grpc"] == 4317 and ports["otlp-http"] == 4318
    )


def compose_overlay(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())["services"]


def test_grafanas_datasources_are_services_here():
    docs = objects("observability")
    sources = yaml.safe_load(
        (ROOT / "infra/grafana/provisioning/datasources/datasources.yaml").read_text()
    )
    for source in sources["datasources"]:
        match = re.fullmatch(r"http://([\w-]+):(\d+)", source["url"])
        assert match, source["url"]
        assert reach(docs, match[1], int(match[2]))[0] == match[1]
    mounts = {m["mountPath"] for m in container(docs, "grafana")["volumeMounts"]}
    providers = yaml.safe_load(
        (ROOT / "infra/grafana/provisioning/dashboards/dashboards.yaml").read_text()
    )
    assert providers["providers"][0]["options"]["path"] in mounts
    assert "/etc/grafana/provisioning/datasources" in mounts
    assert json.loads((K8S / "components/observability/config/recserve-latency.json").read_text())[
        "panels"
    ]


async def test_the_readiness_probe_passes_with_the_pods_own_certificate(tmp_path):
    """The probe's folder as kubelet projects it from the gateway's Secret
    (its own certificate named `operator`) gets SERVING from a port that
    demands the stack's certificates; the same check with no certificate fails."""
    tls_dir = pki.ensure_pki(tmp_path / "tls")
    docs = objects("cpu")
    c = container(docs, "gateway")
    command = c["readinessProbe"]["exec"]["command"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod(docs, "gateway").spec["volumes"]}
    probe = tmp_path / "probe"
    probe.mkdir()
    for item in volumes[mounts[command[5]]]["secret"]["items"]:
        (probe / item["path"]).write_bytes((tls_dir / item["key"]).read_bytes())
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = bind(server, "127.0.0.1:0", Tls.load(tls_dir, "gateway"))
    await server.start()
    try:
        address = f"127.0.0.1:{port}"
        ok = await asyncio.to_thread(healthcheck.main, [address, command[4], str(probe)])
        plain = await asyncio.to_thread(healthcheck.main, [address])
    finally:
        await server.stop(0)
    assert (ok, plain) == (0, 1)
