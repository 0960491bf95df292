"""The production overlay's HPAs are `bench sizing`'s output for the rate
they are annotated with, from the capacity model, and the pods they scale
are the pods the model assumes."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from bench import sizing
from bench.capacity import plan
from services.gateway.config import GatewaySettings
from tests.kubernetes.manifests import K8S, ROOT, SERVICES, container, objects, of_kind, pod

HPA_FILE = K8S / "overlays" / "production" / "hpa.yaml"
MEASURED = K8S / "sizing" / "measured-cpu.json"


def header_command() -> list[str]:
    first = HPA_FILE.read_text().splitlines()[0]
    match = re.fullmatch(
        r"# Written by `(python -m bench sizing .+)`; do not edit, run it again\.", first
    )
    assert match, first
    return shlex.split(match[1])


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_committed_hpas_are_what_the_command_writes():
    argv = header_command()
    assert Path(option(argv, "--write-hpas")) == HPA_FILE.relative_to(ROOT)
    given = dict(zip(argv[4::2], argv[5::2], strict=True))  # after `python -m bench sizing`
    measured = json.loads((ROOT / given.pop("--measured")).read_text())
    at = given.pop("--measured-rate", None)
    cpu_ms, _ = sizing.measured_cpu(measured, None if at is None else float(at))
    rate, _ = int(given.pop("--rate")), given.pop("--write-hpas")
    kwargs = {k.removeprefix("--").replace("-", "_"): float(v) for k, v in given.items()}
    kwargs = {k: int(v) if k == "rows_per_request" else v for k, v in kwargs.items()}
    sizes = sizing.size(cpu_ms, rate, **kwargs)
    expected = sizing.render_hpas(sizes, rate, kwargs.get("utilisation", 0.6), " ".join(argv))
    assert HPA_FILE.read_text() == expected, f"run: {' '.join(argv)}"


def test_the_production_overlay_scales_within_the_sizing_for_its_rate():
    docs = objects("production")
    hpas = of_kind(docs, "HorizontalPodAutoscaler")
    (rate,) = {int(h["metadata"]["annotations"][sizing.SIZED_FOR]) for h in hpas.values()}
    cpu_ms, _ = sizing.measured_cpu(json.loads(MEASURED.read_text()))
    sizes = {s.deployment: s for s in sizing.size(cpu_ms, rate)}
    assert set(hpas) == set(sizes) == {*SERVICES, "envoy", "triton"}
    for name, hpa in hpas.items():
        spec = hpa["spec"]
        assert spec["scaleTargetRef"] == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": name,
        }
        assert (spec["minReplicas"], spec["maxReplicas"]) == (
            sizes[name].minimum,
            sizes[name].maximum,
        )
        assert spec["minReplicas"] >= sizing.HA_FLOOR
        (cpu,) = [m for m in spec["metrics"] if m["type"] == "Resource"]
        assert cpu["resource"]["target"]["averageUtilization"] == 60  # the model's utilisation
        # The HPA owns the count: an apply must not reset it.
        assert "replicas" not in of_kind(docs, "Deployment")[name]["spec"]


def cores(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def test_the_pods_are_the_pods_the_model_sizes():
    docs = objects("production")
    for name in SERVICES:
        requests = container(docs, name)["resources"]["requests"]
        assert cores(requests["cpu"]) == sizing.PYTHON_POD_CORES, name  # one event loop
    envoy = container(docs, "envoy")
    assert cores(envoy["resources"]["requests"]["cpu"]) == sizing.ENVOY_POD_CORES
    assert option(envoy["args"], "--concurrency") == str(sizing.ENVOY_POD_CORES)
    triton = container(docs, "triton")["resources"]
    assert cores(triton["requests"]["cpu"]) == sizing.TRITON_GPU_POD_CORES
    assert triton["limits"]["nvidia.com/gpu"] == "1"
    assert "--model-config-name=gpu" in container(docs, "triton")["args"]


def test_the_custom_metrics_come_from_the_adapter_and_the_code():
    values = yaml.safe_load((K8S / "adapter" / "prometheus-adapter-values.yaml").read_text())
    served = {
        rule["name"]["as"]: rule["seriesQuery"].split("{")[0] for rule in values["rules"]["custom"]
    }
    hpas = of_kind(objects("production"), "HorizontalPodAutoscaler").values()
    used = {
        m["pods"]["metric"]["name"]
        for h in hpas
        for m in h["spec"]["metrics"]
        if m["type"] == "Pods"
    }
    assert used and used <= set(served), used - set(served)
    domain = (ROOT / "services" / "gateway" / "domain.py").read_text()
    assert f'Gauge("{served["recserve_gateway_in_flight"]}"' in domain
    # Triton's own metric, which the Grafana dashboard reads too.
    dashboard = (ROOT / "infra" / "grafana" / "dashboards" / "recserve-latency.json").read_text()
    assert served["triton_queue_duration_us_per_request"] in dashboard
    # Scale out well before the gateway sheds (its in-flight bound).
    assert GatewaySettings().max_in_flight // 2 >= sizing.GATEWAY_IN_FLIGHT_TARGET
    assert "RECSERVE_GATEWAY_MAX_IN_FLIGHT" not in str(container(objects("production"), "gateway"))
    # Prometheus's pod discovery gives the series the labels the rules map.
    scrape = (K8S / "components" / "observability" / "config" / "prometheus.yaml").read_text()
    assert "target_label: namespace" in scrape and "target_label: pod" in scrape
    assert pod(objects("production"), "prometheus").spec["serviceAccountName"] == "prometheus"


def test_the_bounds_follow_the_model():
    cpu_ms, at = sizing.measured_cpu(json.loads(MEASURED.read_text()))
    assert at == 200
    small = {s.deployment: s for s in sizing.size(cpu_ms, 1000)}
    large = {s.deployment: s for s in sizing.size(cpu_ms, 10000)}
    rows = {r["component"]: r for r in plan(cpu_ms, (2000, 20000), 0.6, 200, 2_000_000.0)}
    for name in SERVICES:
        assert small[name].maximum == max(2, rows[name]["replicas@2000"])
        assert large[name].maximum == rows[name]["replicas@20000"] > small[name].maximum
        assert large[name].minimum < large[name].maximum
    # At 10,000/s tritonserver's frontend CPU, not the GPUs, sets Triton's count.
    gpus = rows[sizing.GPU_PROJECTION]["replicas@20000"]
    assert large["triton"].maximum > gpus
    assert (
        rows["tritonserver"]["cores@20000"] / large["triton"].maximum <= sizing.TRITON_GPU_POD_CORES
    )
    with pytest.raises(KeyError):
        sizing.size({k: v for k, v in cpu_ms.items() if k != "ranker"}, 1000)


def test_the_command_prints_writes_json_and_hpas(tmp_path):
    app = __import__("typer").Typer()
    app.command()(sizing.sizing)
    hpas, out = tmp_path / "hpa.yaml", tmp_path / "sizing.json"
    args = [
        "--measured",
        str(MEASURED),
        "--rate",
        "1000",
        "--write-hpas",
        str(hpas),
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "planned peak of 1,000/s" in result.output
    written = [d for d in yaml.safe_load_all(hpas.read_text()) if d]
    assert {d["metadata"]["name"] for d in written} == {*SERVICES, "envoy", "triton"}
    table = json.loads(out.read_text())["rates"]["1000"]
    assert {r["deployment"]: r["maximum"] for r in table} == {
        d["metadata"]["name"]: d["spec"]["maxReplicas"] for d in written
    }
    both = CliRunner().invoke(app, ["--measured", str(MEASURED), "--write-hpas", str(hpas)])
    assert both.exit_code != 0  # two rates, one file: refused
