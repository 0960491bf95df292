"""Every Grafana query names a metric the services or Triton really emit, or
a span attribute the services really set, and every datasource exists."""

import json
import re
import urllib.request
from pathlib import Path

import numpy as np
import onnxruntime as ort
import tritonclient.grpc as triton_grpc
import yaml
from prometheus_client import REGISTRY

import services.features.domain
import services.gateway.domain
import services.gateway.events
import services.gateway.impressions
import services.gateway.outcome_metrics
import services.ranker.domain  # noqa: F401  (rollout, shadow and Triton-memory metrics)
from recserve_kit import attributes
from recserve_kit.server import RPC_DURATION  # noqa: F401
from recserve_stack.triton_process import running_triton

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "infra" / "grafana"
METRIC = re.compile(r"\b((?:recserve|nv)_[a-z_]+)\b")
SPAN_ATTRIBUTE = re.compile(r"\bspan\.(recserve\.[a-z_.]+)")


def dashboards():
    return [json.loads(p.read_text()) for p in sorted((GRAFANA / "dashboards").glob("*.json"))]


def targets():
    for dashboard in dashboards():
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                yield panel, target


SUFFIXES = {
    "histogram": ("_bucket", "_count", "_sum"),
    "counter": ("_total",),
    "gauge": ("",),
    "summary": ("_count", "_sum"),
}


def our_metric_names() -> set[str]:
    """The names each registered family exposes, labelled or not yet observed."""
    return {
        family.name + suffix
        for family in REGISTRY.collect()
        for suffix in SUFFIXES.get(family.type, ("",))
    }


def triton_metric_names(built, tmp_path) -> set[str]:
    repository = built.directory.parents[1] / "triton" / "repository"
    with running_triton(tmp_path, repository, ["ranker"]) as server:
        # One inference, so the per-model counters exist.
        client = triton_grpc.InferenceServerClient(server.grpc_url)
        config = client.get_model_config("ranker", as_json=True)["config"]
        # The config's feature widths are variable (a model's versions share
        # it); the served version's graph has them.
        graph = ort.InferenceSession(str(built.directory / "ranker" / "model.onnx"))
        widths = {i.name: i.shape[1:] for i in graph.get_inputs()}
        inputs = []
        for spec in config["input"]:
            dims = [1, *(int(d) for d in widths[spec["name"]])]
            dtype = "INT64" if spec["data_type"] == "TYPE_INT64" else "FP32"
            tensor = triton_grpc.InferInput(spec["name"], dims, dtype)
            tensor.set_data_from_numpy(np.zeros(dims, np.int64 if dtype == "INT64" else np.float32))
            inputs.append(tensor)
        client.infer("ranker", inputs)
        port = server.settings.triton_metrics_port
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    return {
        line.split("{")[0].split(" ")[0]
        for line in text.decode().splitlines()
        if line and not line.startswith("#")
    }


def test_every_dashboard_query_names_an_emitted_metric(built, tmp_path):
    emitted = our_metric_names() | triton_metric_names(built, tmp_path)
    named = set()
    for panel, target in targets():
        expr = target.get("expr", "")
        for metric in METRIC.findall(expr):
            named.add(metric)
            assert metric in emitted, f"panel {panel['title']!r} uses {metric}, never emitted"
    # The dashboard covers what the issue asks for.
    assert {
        "recserve_gateway_stage_duration_seconds_bucket",
        "recserve_gateway_fallback_total",
        "recserve_gateway_in_flight",
        "recserve_feature_cache_total",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_exec_count",
    } <= named


def test_trace_queries_use_registered_span_attributes():
    queries = [t["query"] for _, t in targets() if "query" in t]
    assert queries, "a trace panel links slow requests to their traces"
    for query in queries:
        for attribute in SPAN_ATTRIBUTE.findall(query):
            assert attribute in attributes.ALL, attribute


def test_panels_use_provisioned_datasources():
    provisioned = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "datasources.yaml").read_text()
    )
    uids = {d["uid"] for d in provisioned["datasources"]}
    for panel, target in targets():
        assert target["datasource"]["uid"] in uids, panel["title"]
