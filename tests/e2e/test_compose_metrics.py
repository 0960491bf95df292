"""Compose only (make compose-test): Prometheus, from Debian's package in
compose.local.yaml's `metrics` profile, scrapes every service and Triton."""

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.helpers import poll_until

SCRAPED = {"gateway:9101", "features:9102", "retriever:9103", "ranker:9104", "triton:8002"}


def test_prometheus_scrapes_every_service(stack):
    if stack.kind != "compose":
        pytest.skip("Prometheus runs in the Compose stack only")

    def healthy() -> set[str]:
        url = "http://127.0.0.1:9090/api/v1/targets?state=active"
        with urllib.request.urlopen(url, timeout=5) as response:
            targets = json.load(response)["data"]["activeTargets"]
        return {t["labels"]["instance"] for t in targets if t["health"] == "up"}

    # Two gateways answer behind one name; the scrape interval is 5 s.
    poll_until(lambda: healthy() >= SCRAPED, 60, 1.0, "Prometheus to scrape every service")
    query = "http://127.0.0.1:9090/api/v1/query?query=recserve_gateway_concurrency_limit"
    with urllib.request.urlopen(query, timeout=5) as response:
        assert json.load(response)["data"]["result"], "no gateway series in Prometheus"


def test_every_dashboard_query_is_promql_prometheus_evaluates(stack):
    if stack.kind != "compose":
        pytest.skip("Prometheus runs in the Compose stack only")
    from tests.integration.test_dashboards import targets

    for panel, target in targets():
        if "expr" not in target:
            continue  # a trace (Tempo) query
        query = urllib.parse.urlencode({"query": target["expr"]})
        url = f"http://127.0.0.1:9090/api/v1/query?{query}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                status = json.load(response)["status"]
        except urllib.error.HTTPError as error:  # 400: the query does not parse
            status = f"{error.code}: {error.read().decode()[:200]}"
        assert status == "success", (panel["title"], target["expr"], status)
