"""The Kubernetes overlays, rendered with `kubectl kustomize`, and ways to
walk them: objects by kind, pod specs (the Spark executors' template too),
containers, Services and what a Service's name and port reach."""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "infra" / "kubernetes"
# your-shop: a shop's own dataset (components/your-dataset) on the cpu overlay.
OVERLAYS = ("cpu", "gpu", "observability", "production", "your-shop")
KVENV_PYTHON = ROOT / ".venv-k8s" / "bin" / "python"
SERVICES = ("gateway", "features", "retriever", "ranker")
NAME = "app.kubernetes.io/name"


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail(
            "kubectl is not on PATH: the Kubernetes tests render every overlay with "
            "`kubectl kustomize` (kubectl 1.27+, which bundles Kustomize 5). Install "
            "it; CI machines and the development image have /usr/bin/kubectl."
        )
    return found


def checker(name: str) -> Path:
    path = ROOT / ".venv-k8s" / "bin" / name
    if not path.exists():
        pytest.fail(
            f"{path} is missing: run `make .venv-k8s/.installed` (requirements/kubernetes.txt)"
        )
    return path


@functools.cache
def render_dir(directory: Path) -> str:
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"kubectl kustomize {directory}: {result.stderr}"
    return result.stdout


def render(overlay: str) -> str:
    return render_dir(K8S / "overlays" / overlay)


def objects(overlay: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(render(overlay)) if d]


def of_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def app_of(labels: dict) -> str:
    return labels.get(NAME, "")


@dataclass(frozen=True)
class Pod:
    owner: str  # Kind/name of what makes the pods
    app: str  # their app.kubernetes.io/name
    labels: dict
    spec: dict


WORKLOADS = ("Deployment", "StatefulSet", "Job")


def executor_template(docs: list[dict]) -> dict:
    data = of_kind(docs, "ConfigMap")["recserve-spark"]["data"]
    return yaml.safe_load(data["executor-template.yaml"])


def pods(docs: list[dict]) -> Iterator[Pod]:
    for d in docs:
        if d["kind"] in WORKLOADS:
            template = d["spec"]["template"]
        elif d["kind"] == "CronJob":
            template = d["spec"]["jobTemplate"]["spec"]["template"]
        else:
            continue
        labels = template["metadata"]["labels"]
        yield Pod(f"{d['kind']}/{d['metadata']['name']}", app_of(labels), labels, template["spec"])
    template = executor_template(docs)
    labels = template["metadata"]["labels"]
    yield Pod("Spark executor template", app_of(labels), labels, template["spec"])


def containers(spec: dict) -> list[dict]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def pod(docs: list[dict], app: str) -> Pod:
    (found,) = [p for p in pods(docs) if p.app == app]
    return found


def container(docs: list[dict], app: str, name: str | None = None) -> dict:
    (found,) = [c for c in containers(pod(docs, app).spec) if c["name"] == (name or app)]
    return found


def env(c: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def from_pod_ip(c: dict) -> set[str]:
    """The container's variables the kubelet sets to the pod's IP (downward API)."""
    return {
        e["name"]
        for e in c.get("env", [])
        if e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP"
    }


def advertised_ports(c: dict) -> list[int]:
    """Ports a container tells its peers to reach it on at its pod IP: each
    `*_ADVERTISE_ADDR` of the form `$(VAR):port`, VAR the pod's IP."""
    ports = []
    for key, value in env(c).items():
        if key.endswith("_ADVERTISE_ADDR"):
            found = address(value)
            assert found and found[0] in {f"$({v})" for v in from_pod_ip(c)}, (key, value)
            ports.append(found[1])
    return ports


def selects(selector: dict, labels: dict) -> bool:
    """A label selector (matchLabels; matchExpressions with In) against labels."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", expression
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def reach(docs: list[dict], host: str, port: int) -> tuple[str, int]:
    """(app, container port) that a Service name and port lead to; AssertionError if none.
    A StatefulSet pod's name under its headless Service (qdrant-0.qdrant-headless) too."""
    services = of_kind(docs, "Service")
    parts = host.split(".")
    # service, service.namespace..., or pod.service (a StatefulSet's peers)
    service_name = parts[1] if len(parts) > 1 and parts[1] in services else parts[0]
    assert service_name in services, f"{host}:{port}: no Service {service_name}"
    service = services[service_name]
    entries = [p for p in service["spec"]["ports"] if p["port"] == port]
    assert entries, f"{host}:{port}: Service {service_name} has no port {port}"
    target_port = entries[0].get("targetPort", port)
    selector = {"matchLabels": service["spec"]["selector"]}
    targets = [p for p in pods(docs) if selects(selector, p.labels)]
    assert targets, f"Service {service_name} selects no pods"
    (target,) = {p.app for p in targets}
    numbers = {
        cp["containerPort"]
        for p in targets
        for c in p.spec["containers"]
        for cp in c.get("ports", [])
        if target_port in (cp.get("name"), cp["containerPort"])
    }
    assert len(numbers) == 1, f"{host}:{port}: no container port {target_port} on {target}"
    return target, numbers.pop()


def address(value: str) -> tuple[str, int] | None:
    """host and port of `host:port` or a URL with a port; None for anything else."""
    if "://" in value:
        parts = urlsplit(value)
        return (parts.hostname, parts.port) if parts.hostname and parts.port else None
    host, _, port = value.rpartition(":")
    return (host, int(port)) if host and port.isdigit() and "/" not in host else None


def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
