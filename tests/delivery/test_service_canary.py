"""The service level of delivery: a new gateway build behind Envoy's weighted
clusters and mirror, moved and judged by `python -m recserve_stack canary`
on the real stack. Each test starts a stack whose canary gateway is the build
under test."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from recserve_stack.service_canary import figures_between, percentile, weights
from tests.delay_proxy import DelayProxy
from tests.delivery.traffic import Load
from tests.helpers import data_dir_with_artifacts
from tests.stack import running_stack

ROOT = Path(__file__).resolve().parents[2]


def canary(stack, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recserve_stack", "canary", *args],
        env=stack.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def envoy_counter(stack, name: str) -> float:
    port = stack.port("envoy_admin")
    with urllib.request.urlopen(
        f"http://127.0.0.1:{port}/stats?format=json&filter=^{name}$", timeout=5
    ) as response:
        stats = json.loads(response.read())["stats"]
    return sum(float(s.get("value", 0)) for s in stats if s.get("name") == name)


@pytest.fixture
def data_dir(built, tmp_path):
    return data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])


def test_a_good_gateway_build_goes_to_all_traffic_with_mirroring(data_dir):
    with running_stack(data_dir, canary={}) as stack, Load(stack.envoy_address) as load:
        result = canary(
            stack,
            "start",
            "build-2",
            "--soak-s",
            "3",
            "--min-requests",
            "10",
            "--mirror-percent",
            "20",
            # A shared machine's stall must not roll a good build back.
            "--max-p99-ms",
            "5000",
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "canary: promoted" in result.stdout
        load.stop.set()
        served_by_canary = load.gateways.count("canary")
        completed = envoy_counter(stack, "cluster.gateway_canary.upstream_rq_completed")
        runtime = canary(stack, "status").stdout
        assert "'routing.gateway.gateway_canary': '10000'" in runtime
        reset = canary(stack, "reset")
        assert reset.returncode == 0, reset.stdout + reset.stderr
    assert load.errors == []
    # Both builds answered while it moved; the mirror sent the canary more
    # requests than it answered.
    assert {"stable", "canary"} <= set(load.gateways)
    assert completed > served_by_canary > 0
    history = [line for line in result.stdout.splitlines() if line.startswith("promote at")]
    assert len(history) == 4, result.stdout


def test_a_slow_gateway_build_is_rolled_back(data_dir):
    # The build under test reaches the ranker through a link 200 ms slow each
    # way (its stage caps raised to wait for it): its Score, the one ranker
    # call of a known user (whose vector comes with their features), is about
    # 400 ms slower.
    def slow(env: dict[str, str]) -> dict[str, str]:
        proxy.upstream = ("127.0.0.1", int(env["RECSERVE_STACK_RANKER_PORT"]))
        return {
            "RECSERVE_GATEWAY_RANKER_ADDR": proxy.address,
            "RECSERVE_GATEWAY_EMBED_MS": "600",
            "RECSERVE_GATEWAY_RANK_MS": "600",
            "RECSERVE_GATEWAY_BUDGET_MS": "1500",
        }

    with (
        DelayProxy(0.2) as proxy,
        running_stack(data_dir, canary=slow) as stack,
        Load(stack.envoy_address) as load,
    ):
        result = canary(stack, "start", "slow-build", "--soak-s", "600", "--mirror-percent", "20")
        load.stop.set()
        assert result.returncode == 0, result.stdout + result.stderr
        status = canary(stack, "status").stdout
    assert "canary: rolled_back" in result.stdout, result.stdout
    assert "rollback at 5%: median" in result.stdout or "rollback at 5%: p99" in result.stdout
    assert "'routing.gateway.gateway_canary': '0'" in status
    assert load.errors == []


def test_weights_percentiles_and_figures_from_envoy_stats():
    from recserve_delivery.state import RolloutState

    running = RolloutState(stable="gateway", candidate="c", status="running", shadow_percent=20)
    assert weights(running) == {
        "routing.gateway.gateway": 9500,
        "routing.gateway.gateway_canary": 500,
        "routing.mirror.gateway_canary": 20,
    }
    promoted = running.model_copy(update={"status": "promoted"})
    assert weights(promoted)["routing.gateway.gateway_canary"] == 10000
    rolled_back = running.model_copy(update={"status": "rolled_back"})
    assert weights(rolled_back)["routing.gateway.gateway"] == 10000
    buckets = [(10.0, 50.0), (100.0, 98.0), (200.0, 100.0)]
    assert percentile(buckets, 50) == 10.0
    assert percentile(buckets, 99) == pytest.approx(150.0)
    assert percentile([], 99) == 0.0
    name = "cluster.gateway_canary."
    before = {"counters": {name + "upstream_rq_completed": 10}, "buckets": [(10.0, 5.0)]}
    after = {
        "counters": {
            name + "upstream_rq_completed": 30,
            name + "grpc.recserve.recommend.v1.RecommendService.Recommend.failure": 2,
        },
        "buckets": [(10.0, 25.0)],
    }
    figures = figures_between(before, after)
    assert (figures.requests, figures.errors, figures.timed) == (20, 2, 20)
