"""A canary of a new gateway build at Envoy, judged like a model rollout.

Envoy's RecommendService route splits requests between the ``gateway`` and
``gateway_canary`` clusters by weights read from its runtime, and mirrors a
share of requests to the canary (answers dropped). This controller moves the
weights in steps and decides each one with the same state machine and judge
as the ranker's model rollout, on the canary cluster's own figures from
Envoy: requests, gRPC failures (the grpc_stats filter) and upstream time
(a histogram with fine buckets around the 150 ms trigger). State is persisted
in ``<data_dir>/rollout/gateway.json``; a controller started again resumes
(`canary watch`), and operator commands from another shell change the file,
which the controller reads at every look.

Requests are split per request, not per user: a gateway build serves the same
models, so no user's answer depends on which one it reached.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from recserve_delivery import state as rollout_state
from recserve_delivery.rollout import Plan, Rollout
from recserve_delivery.state import Figures, RolloutState
from recserve_kit.errors import FailedPrecondition

log = logging.getLogger(__name__)

NAME = "gateway"  # the state file's name
CANARY = "gateway_canary"
STABLE = "gateway"
WEIGHT_SCALE = 10_000  # Envoy weights are integers: hundredths of a percent
METHODS = ("Recommend", "SimilarItems")
SERVICE = "recserve.recommend.v1.RecommendService"


class EnvoyAdmin:
    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def set_runtime(self, values: dict[str, int]) -> None:
        query = urllib.parse.urlencode(values)
        request = urllib.request.Request(f"{self.url}/runtime_modify?{query}", method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            response.read()

    def runtime(self) -> dict[str, str]:
        with urllib.request.urlopen(f"{self.url}/runtime", timeout=self.timeout_s) as response:
            entries = json.loads(response.read())["entries"]
        return {k: v.get("final_value", "") for k, v in entries.items()}

    def cluster_hosts(self, cluster: str) -> dict[str, bool]:
        """Each host of ``cluster`` ("address:port", or a socket's path) and whether Envoy's
        health checks pass on it."""
        with urllib.request.urlopen(
            f"{self.url}/clusters?format=json", timeout=self.timeout_s
        ) as response:
            statuses = json.loads(response.read()).get("cluster_statuses", [])
        hosts: dict[str, bool] = {}
        for status in statuses:
            if status.get("name") != cluster:
                continue
            for host in status.get("host_statuses", []):
                address = host.get("address", {})
                socket = address.get("socket_address", {})
                health = host.get("health_status", {})
                failed = any(k.startswith("failed") and v for k, v in health.items())
                healthy = health.get("eds_health_status", "HEALTHY") == "HEALTHY" and not failed
                name = (
                    address["pipe"]["path"]
                    if "pipe" in address
                    else f"{socket.get('address')}:{socket.get('port_value')}"
                )
                hosts[name] = healthy
        return hosts

    def cluster_stats(self, cluster: str) -> dict[str, Any]:
        """Counters and cumulative histogram buckets of one cluster."""
        query = urllib.parse.urlencode(
            {
                "format": "json",
                "filter": f"^cluster\\.{cluster}\\.",
                "histogram_buckets": "cumulative",
            }
        )
        with urllib.request.urlopen(f"{self.url}/stats?{query}", timeout=self.timeout_s) as r:
            payload = json.loads(r.read())
        counters: dict[str, float] = {}
        buckets: list[tuple[float, float]] = []
        for stat in payload["stats"]:
            if "histograms" in stat:
                for histogram in stat["histograms"]:
                    if histogram["name"] == f"cluster.{cluster}.upstream_rq_time":
                        buckets = [
                            (b["upper_bound"], b["cumulative"]) for b in histogram["buckets"]
                        ]
            else:
                counters[stat["name"]] = stat["value"]
        return {"counters": counters, "buckets": buckets}


def weights(state: RolloutState) -> dict[str, int]:
    """Envoy runtime values for a state: the canary's share and mirror."""
    if state.active:
        canary = round(state.share_percent * WEIGHT_SCALE / 100)
        mirror = round(state.shadow_percent)
    elif state.status == "promoted":
        canary, mirror = WEIGHT_SCALE, 0
    else:
        canary, mirror = 0, 0
    return {
        "routing.gateway.gateway": WEIGHT_SCALE - canary,
        f"routing.gateway.{CANARY}": canary,
        f"routing.mirror.{CANARY}": mirror,
    }


def percentile(buckets: list[tuple[float, float]], q: float) -> float:
    """The q-th percentile (0-100) of counts per upper bound, interpolated
    linearly inside the bucket that holds it."""
    total = buckets[-1][1] if buckets else 0
    if not total:
        return 0.0
    rank = q / 100 * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            inside = (rank - lower_count) / (count - lower_count) if count > lower_count else 1
            return lower_bound + inside * (bound - lower_bound)
        lower_bound, lower_count = bound, count
    return buckets[-1][0]


def figures_between(before: dict[str, Any], after: dict[str, Any]) -> Figures:
    """The canary cluster's figures between two snapshots."""

    def counter(snapshot: dict[str, Any], suffix: str) -> float:
        return float(snapshot["counters"].get(f"cluster.{CANARY}.{suffix}", 0))

    def delta(suffix: str) -> float:
        return counter(after, suffix) - counter(before, suffix)

    failures = sum(delta(f"grpc.{SERVICE}.{m}.failure") for m in METHODS)
    failures += delta("upstream_rq_5xx")  # reset or refused: no gRPC status at all
    requests = int(delta("upstream_rq_completed"))
    old = dict(before["buckets"])
    buckets = [(bound, count - old.get(bound, 0)) for bound, count in after["buckets"]]
    timed = int(buckets[-1][1]) if buckets else 0
    return Figures(requests, int(failures), percentile(buckets, 50), percentile(buckets, 99), timed)


@dataclass
class ServiceCanary:
    admin: EnvoyAdmin
    rollout: Rollout
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        self.baseline = self.admin.cluster_stats(CANARY)
        self.step_started_at = self.rollout.state.step_started_at

    @property
    def state(self) -> RolloutState:
        return self.rollout.state

    def apply(self) -> None:
        self.admin.set_runtime(weights(self.state))

    def check_canary_running(self) -> None:
        """A canary build must be up, behind its own cluster: without one,
        Envoy's gateway_canary cluster points at the stable gateway and a
        canary would promote nothing."""
        canary = self.admin.cluster_hosts(CANARY)
        stable = self.admin.cluster_hosts(STABLE)
        if not canary or set(canary) <= set(stable):
            raise FailedPrecondition(
                "no canary build is running: Envoy's gateway_canary cluster has "
                f"{'no host' if not canary else 'only the stable gateway'}. Start one first: "
                "locally RECSERVE_STACK_GATEWAY_CANARY_PORT=<port> (and "
                "RECSERVE_STACK_GATEWAY_CANARY_ENV for what the build changes) with "
                "`make run`; in Compose `docker compose --profile canary up -d gateway-canary`"
            )
        if not any(canary.values()):
            raise FailedPrecondition(
                f"the canary build at {', '.join(canary)} does not pass Envoy's health "
                "checks yet; wait for it to be ready"
            )

    def start(self, plan: Plan) -> None:
        self.check_canary_running()
        self.rollout.start(plan)
        self._new_baseline()
        self.apply()

    def abort(self) -> None:
        """Every request back on the stable gateways, in any state: a canary
        in progress is aborted, a promoted one is undone; otherwise they are
        there already (the weights are applied again all the same)."""
        if self.state.active:
            self.rollout.abort()
        elif self.state.status == "promoted":
            self.rollout.rebase(STABLE, "promotion undone by the operator (abort)")
        self.apply()

    def reset(self) -> None:
        """Every request to the gateway cluster again and a clean state, in
        any state (after a promoted build is deployed as the gateway, or
        after a controller stopped part way); a canary in progress is
        aborted first, so its history says so."""
        if self.state.active:
            self.rollout.abort()
        self.rollout.rebase(STABLE, "reset by the operator")
        self.apply()

    def resume_watch(self) -> None:
        """A controller started again: the step's soak and figures start over."""
        self.rollout.resumed_after_restart()
        self._new_baseline()
        self.apply()

    def tick(self) -> str:
        """One look: re-read operator changes, judge, apply. Returns the status."""
        persisted = rollout_state.load(self.rollout.data_dir, NAME)
        if persisted is not None and persisted != self.state:
            self.rollout.state = persisted  # pause, resume, promote or abort from a shell
        if self.state.step_started_at != self.step_started_at:
            self._new_baseline()
        if self.state.active:
            figures = figures_between(self.baseline, self.admin.cluster_stats(CANARY))
            self.rollout.tick(None, figures)
            if self.state.step_started_at != self.step_started_at:
                self._new_baseline()
        self.apply()
        return self.state.status

    def _new_baseline(self) -> None:
        self.baseline = self.admin.cluster_stats(CANARY)
        self.step_started_at = self.state.step_started_at
