"""Security as in Compose and better: every container non-root with a
read-only root, no privilege escalation, no capabilities, seccomp and
resources; only Envoy exposed; each internal port open only to the pods
that dial it (derived from the configs, not listed by hand); a disruption
budget for every replicated tier; RBAC without wildcards."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest
import yaml

from recserve_stack import envoy
from tests.kubernetes.manifests import (
    K8S,
    OVERLAYS,
    ROOT,
    address,
    advertised_ports,
    containers,
    env,
    executor_template,
    objects,
    of_kind,
    pods,
    reach,
    selects,
)

ANYONE = "*"
API_CALLERS = {"restore-keys", "publish-secrets", "restart-envoy", "rescore", "prometheus"}


@pytest.fixture(scope="module", params=OVERLAYS)
def docs(request):
    return objects(request.param)


def test_every_container_is_locked_down_and_sized(docs):
    found = 0
    for p in pods(docs):
        context = p.spec["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] >= 10000, p.owner
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, p.owner
        assert p.spec["automountServiceAccountToken"] is False, p.owner
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not p.spec.get(key), (p.owner, key)
        assert not [v for v in p.spec.get("volumes", []) if "hostPath" in v], p.owner
        for c in containers(p.spec):
            found += 1
            security = c["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, (p.owner, c["name"])
            assert security["readOnlyRootFilesystem"] is True, (p.owner, c["name"])
            assert security["capabilities"] == {"drop": ["ALL"]}, (p.owner, c["name"])
            assert not security.get("privileged") and not c.get("ports", [{}])[0].get("hostPort")
            if p.app != "rescore-executor":  # Spark sets the executors' resources
                resources = c["resources"]
                for kind in ("requests", "limits"):
                    assert {"cpu", "memory"} <= set(resources[kind]), (p.owner, c["name"], kind)
                memory = resources["requests"]["memory"], resources["limits"]["memory"]
                assert memory[0] == memory[1], (p.owner, c["name"], "memory request = limit")
            token = any(
                m["mountPath"].startswith("/var/run/secrets/kubernetes.io")
                for m in c.get("volumeMounts", [])
            )
            assert token == (c["name"] in API_CALLERS), (p.owner, c["name"], "API token")
    assert found >= 14
    (namespace,) = of_kind(docs, "Namespace").values()
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_images_are_pinned_to_versions_and_match_compose(docs):
    version = re.search(
        r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE
    )[1]
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    observability = yaml.safe_load((ROOT / "compose.observability.yaml").read_text())["services"]
    theirs = {
        s["image"].split(":")[0]: s["image"]
        for s in [*compose.values(), *observability.values()]
        if "image" in s
    }
    images = {
        c["image"] for p in pods(docs) if p.app != "rescore-executor" for c in containers(p.spec)
    }
    for image in images:
        name, _, tag = image.partition(":")
        assert re.fullmatch(r"v?\d+\.\d+\.\d+(-[\w.]+)?", tag), image
        if name.startswith("recserve/"):
            assert tag == version, image  # the project's version, as pushed
        else:
            assert theirs[name] == image, f"{image}: Compose runs {theirs[name]}"


def test_only_envoy_is_reachable_from_outside(docs):
    exposed = [
        s["metadata"]["name"]
        for s in of_kind(docs, "Service").values()
        if s["spec"].get("type", "ClusterIP") in ("LoadBalancer", "NodePort")
    ]
    assert exposed == ["envoy-edge"]
    (edge,) = [
        s for s in of_kind(docs, "Service").values() if s["metadata"]["name"] == "envoy-edge"
    ]
    # TLS alone: the port that terminates it (infra/compose/envoy.yaml's edge listener).
    assert [(p["port"], p["targetPort"]) for p in edge["spec"]["ports"]] == [(443, "https")]
    assert reach(docs, "envoy-edge", 443) == ("envoy", envoy.COMPOSE_EDGE_PORT)
    assert not [d for d in docs if d["kind"] in ("Ingress", "Gateway", "HTTPRoute")]


def edges(docs: list[dict]) -> dict[tuple[str, int], set[str]]:
    """(app, container port) -> the apps that dial it, from the configs."""
    out: dict[tuple[str, int], set[str]] = defaultdict(set)
    services = of_kind(docs, "Service")

    def dial(caller: str, host: str, port: int) -> None:
        out[reach(docs, host, port)].add(caller)

    for p in pods(docs):
        for c in containers(p.spec):
            values = [*env(c).values(), *c.get("command", []), *c.get("args", [])]
            for token in (t.strip("'\"") for v in values for t in re.split(r"[\s=]+", v)):
                found = address(token)
                if found and {found[0].split(".")[0], *found[0].split(".")[1:2]} & set(services):
                    dial(p.app, *found)
            # A replica's address for its peers (the ranker's rollout writer,
            # to which the other rankers forward operator calls): its pod IP.
            for port in advertised_ports(c):
                out[(p.app, port)].add(p.app)
            # The stack's own clients of Envoy (StackSettings: host and port apart).
            stack = env(c)
            if "RECSERVE_STACK_HOST" in stack and "RECSERVE_STACK_ENVOY_PORT" in stack:
                dial(p.app, stack["RECSERVE_STACK_HOST"], int(stack["RECSERVE_STACK_ENVOY_PORT"]))
    # qdrant-client with prefer_grpc takes the REST URL's port + 1 for gRPC.
    out[("qdrant", 6334)] |= out[("qdrant", 6333)] - {"qdrant"}
    config = yaml.safe_load(envoy.COMPOSE_CONFIG.read_text())
    for cluster in config["static_resources"]["clusters"]:
        socket = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
        host, port = socket["address"]["socket_address"].values()
        if host in services:  # (the canary's Service exists only with a canary)
            dial("envoy", host, port)
    collector = yaml.safe_load((K8S / "base/config/collector.yaml").read_text())
    dial("otel-collector", *address(collector["exporters"]["otlp/tempo"]["endpoint"]))
    for s in of_kind(docs, "Service").values():
        if s["spec"].get("type") == "LoadBalancer":
            for port in s["spec"]["ports"]:
                out[reach(docs, s["metadata"]["name"], port["port"])].add(ANYONE)
    apps = {p.app for p in pods(docs)}
    if "grafana" in apps:
        sources = yaml.safe_load(
            (K8S / "components/observability/config/datasources.yaml").read_text()
        )
        for source in sources["datasources"]:
            dial("grafana", *address(source["url"]))
        scrape = yaml.safe_load(
            (K8S / "components/observability/config/prometheus.yaml").read_text()
        )
        (keep,) = [
            r["regex"]
            for r in scrape["scrape_configs"][0]["relabel_configs"]
            if r["source_labels"] == ["__meta_kubernetes_pod_container_port_name"]
        ]
        for p in pods(docs):
            for c in p.spec["containers"]:
                for port in c.get("ports", []):
                    if re.fullmatch(keep, port["name"]):
                        out[(p.app, port["containerPort"])].add("prometheus")
    hpas = of_kind(docs, "HorizontalPodAutoscaler").values()
    if any(m["type"] == "Pods" for h in hpas for m in h["spec"]["metrics"]):
        # The HPAs' Pods metrics: prometheus-adapter, from its own namespace.
        values = yaml.safe_load((K8S / "adapter/prometheus-adapter-values.yaml").read_text())
        assert values["prometheus"]["url"].startswith("http://prometheus.")
        out[reach(docs, "prometheus", values["prometheus"]["port"])].add("prometheus-adapter@any")
    # Spark: executors register with the driver and fetch blocks from it and
    # from each other, on the ports the job sets.
    args = dict(
        a.removeprefix("--conf=").split("=", 1) for a in spark_args(docs) if a.startswith("--conf=")
    )
    for key in ("spark.driver.port", "spark.driver.blockManager.port"):
        out[("rescore", int(args[key]))].add("rescore-executor")
    out[("rescore-executor", int(args["spark.blockManager.port"]))] |= {
        "rescore",
        "rescore-executor",
    }
    return out


def spark_args(docs: list[dict]) -> list[str]:
    (c,) = of_kind(docs, "CronJob")["rescore"]["spec"]["jobTemplate"]["spec"]["template"]["spec"][
        "containers"
    ]
    return c["args"]


def allowed(docs: list[dict]) -> dict[tuple[str, int], set[str]]:
    """(app, port) -> who the NetworkPolicies let in."""
    out: dict[tuple[str, int], set[str]] = defaultdict(set)
    everything = list(pods(docs))
    for policy in of_kind(docs, "NetworkPolicy").values():
        spec = policy["spec"]
        assert spec["policyTypes"] == ["Ingress"], policy["metadata"]["name"]
        targets = [p for p in everything if selects(spec["podSelector"], p.labels)]
        for rule in spec.get("ingress", []):
            assert rule.get("ports"), "a rule without ports opens every port"
            callers = set()
            for peer in rule.get("from", [{"anyone": True}]):
                if "anyone" in peer:
                    callers.add(ANYONE)
                elif "namespaceSelector" in peer:
                    assert peer["namespaceSelector"] == {} and set(peer) == {
                        "namespaceSelector",
                        "podSelector",
                    }
                    callers.add(
                        peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"] + "@any"
                    )
                else:
                    assert set(peer) == {"podSelector"}, peer  # no ipBlock
                    matched = {p.app for p in everything if selects(peer["podSelector"], p.labels)}
                    assert matched, f"{policy['metadata']['name']}: {peer} selects no pod"
                    callers |= matched
            for target in targets:
                for port in rule["ports"]:
                    out[(target.app, port["port"])] |= callers
    return out


def test_each_port_is_open_only_to_the_pods_that_dial_it(docs):
    (deny,) = [p for p in of_kind(docs, "NetworkPolicy").values() if p["spec"]["podSelector"] == {}]
    assert deny["spec"] == {
        "podSelector": {},
        "policyTypes": ["Ingress"],
    }  # everything else: denied
    expected, granted = edges(docs), allowed(docs)
    ports = {
        (p.app, port["containerPort"])
        for p in pods(docs)
        for c in p.spec["containers"]
        for port in c.get("ports", [])
    }
    ports |= set(expected) | set(granted)
    mismatched = {
        port: {
            "dialled by": sorted(expected.get(port, ())),
            "allowed": sorted(granted.get(port, ())),
        }
        for port in sorted(ports)
        if expected.get(port, set()) != granted.get(port, set())
    }
    assert mismatched == {}
    # TLS from anywhere; plaintext only for the stack's own job.
    assert expected[("envoy", 8443)] == {ANYONE} and expected[("envoy", 8080)] == {"retrain"}
    assert expected[("triton", 8001)] == {"ranker"} and expected[("redis", 6379)] >= {"features"}
    # Probes come from the node (always admitted): Triton's HTTP health port
    # and the Collector's health port take nobody else.
    assert not granted.get(("triton", 8000)) and not granted.get(("otel-collector", 13133))


def test_a_missing_policy_is_caught():
    docs = [
        d
        for d in objects("cpu")
        if not (d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "triton")
    ]
    assert edges(docs)[("triton", 8001)] != allowed(docs).get(("triton", 8001), set())


def test_each_replicated_tier_has_a_disruption_budget(docs):
    budgets = of_kind(docs, "PodDisruptionBudget").values()
    scaled = {
        h["spec"]["scaleTargetRef"]["name"]: h["spec"]["minReplicas"]
        for h in of_kind(docs, "HorizontalPodAutoscaler").values()
    }
    for kind in ("Deployment", "StatefulSet"):
        for name, workload in of_kind(docs, kind).items():
            replicas = max(workload["spec"].get("replicas", 1), scaled.get(name, 1))
            labels = workload["spec"]["template"]["metadata"]["labels"]
            covering = [b for b in budgets if selects(b["spec"]["selector"], labels)]
            if replicas > 1 or name in scaled:
                assert len(covering) == 1, (
                    f"{kind}/{name}: {replicas} replicas, {len(covering)} PDBs"
                )
                (budget,) = covering
                assert budget["spec"].get("maxUnavailable") == 1, name
    for budget in budgets:
        assert any(selects(budget["spec"]["selector"], p.labels) for p in pods(docs)), budget


def test_rbac_is_narrow(docs):
    names = [
        v["secret"]["secretName"]
        for p in pods(docs)
        for v in p.spec.get("volumes", [])
        if "secret" in v
    ]
    for role in of_kind(docs, "Role").values():
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], role
            if "secrets" in rule["resources"]:
                assert role["metadata"]["name"] == "recserve-init"
                assert rule["verbs"] == ["create"] or set(rule["resourceNames"]) >= set(names)
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    spark = of_kind(docs, "Role")["recserve-spark"]["rules"]
    assert {r for rule in spark for r in rule["resources"]} == {"pods", "configmaps"}
    bound = {
        b["roleRef"]["name"]: b["subjects"][0]["name"]
        for b in of_kind(docs, "RoleBinding").values()
    }
    accounts = {p.spec.get("serviceAccountName") for p in pods(docs)} - {None}
    assert accounts == set(bound.values())


def test_each_service_mounts_only_its_own_certificate(docs):
    for p in pods(docs):
        for v in p.spec.get("volumes", []):
            secret = v.get("secret", {}).get("secretName", "")
            if secret.startswith("recserve-tls-"):
                assert secret == f"recserve-tls-{p.app}", (p.owner, secret)
            if secret == "recserve-admin" and p.app == "retrain":
                # The admin token alone (the rollout's admin calls), never the signing key.
                assert v["secret"]["items"] == [{"key": "admin.token", "path": "admin.token"}]
                continue
            assert secret not in ("recserve-ca", "recserve-admin", "recserve-tls-operator"), p.owner
    assert executor_template(docs)["spec"]["automountServiceAccountToken"] is False
