"""Shadow scoring's cost: rounds alternating shadow N% and off, side by side.

Needs the running stack (`make run`). A second model version is needed for
the candidate: by default the current artifact is published again as
``<version>-shadow`` (the same files; what is measured is the work, not a
difference between models). "On" rounds start a rollout that moves no user
(one step at 0.001% of users, soak far past the round) with shadow N%, and
abort it afterwards; "off" rounds run with no rollout.
"""

from __future__ import annotations

import statistics
import urllib.request
from typing import Any

from bench.cpu_profile import run as run_cpu
from pipelines.triton_repo import publish_copy
from recserve.ranker.v1 import ranker_pb2 as pb
from recserve_model import artifacts
from recserve_stack.rollout_cli import call
from recserve_stack.settings import StackSettings


def _shadows_compared(settings: StackSettings) -> float:
    url = f"http://{settings.host}:{settings.metrics_port('ranker')}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    prefix = 'recserve_ranker_shadow_total{outcome="compared"} '
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def run(
    settings: StackSettings,
    rate: float,
    duration: float,
    rounds: int,
    percent: float,
    candidate: str = "",
) -> dict[str, object]:
    if not candidate:
        current = artifacts.current(settings.data_dir).name
        candidate = f"{current}-shadow"
        publish_copy(settings.data_dir, current, candidate)
    target = f"{settings.host}:{settings.envoy_port}"
    results: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for n in range(rounds):
        for mode in ("off", "on") if n % 2 == 0 else ("on", "off"):
            compared = _shadows_compared(settings)
            if mode == "on":
                call(
                    "StartRollout",
                    pb.StartRolloutRequest(
                        version=candidate,
                        steps_percent=[0.001, 100],
                        soak_s=1e9,
                        min_requests=1_000_000_000,
                        shadow_percent=percent,
                    ),
                    settings,
                )
            try:
                result = run_cpu(target, rate, duration)
            finally:
                if mode == "on":
                    call("AbortRollout", pb.AbortRolloutRequest(), settings)
            result["shadows_compared"] = _shadows_compared(settings) - compared
            results[mode].append(result)
    return {"candidate": candidate, "shadow_percent": percent, **summary(results)}


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def figures(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Medians over the rounds of one mode; errors and degraded answers summed."""
    latency = [r["latency"] for r in runs]
    return {
        "cpu_ms_per_request": _median([float(r["total_cpu_ms_per_request"]) for r in runs]),
        "load_generator_cpu_ms": _median(
            [float(r["cpu_ms_per_request"]["load generator (this process)"]) for r in runs]
        ),
        "p50_ms": _median([float(lat["p50_ms"]) for lat in latency]),
        "p99_ms": _median([float(lat["p99_ms"]) for lat in latency]),
        "full_answers_per_s": _median([float(lat["full_answers_per_s"]) for lat in latency]),
        "degraded": sum(sum(lat["degraded"].values()) for lat in latency),
        "errors": sum(sum(lat["errors"].values()) for lat in latency),
        "shadows_compared": sum(float(r["shadows_compared"]) for r in runs),
    }


def summary(results: dict[str, list[dict[str, Any]]]) -> dict[str, object]:
    on, off = figures(results["on"]), figures(results["off"])

    def paired(key: str, part: str = "") -> float:
        """Median of (on - off) over the rounds run side by side."""

        def value(r: dict[str, Any]) -> float:
            return float(r[part][key] if part else r[key])

        pairs = zip(results["on"], results["off"], strict=True)
        return _median([value(a) - value(b) for a, b in pairs])

    return {
        "off": off,
        "on": on,
        "paired_cpu_ms_delta": paired("total_cpu_ms_per_request"),
        "paired_p50_ms_delta": paired("p50_ms", "latency"),
        "paired_p99_ms_delta": paired("p99_ms", "latency"),
        "cpu_ratio_on_over_off": round(on["cpu_ms_per_request"] / off["cpu_ms_per_request"], 3),
        "p99_ratio_on_over_off": round(on["p99_ms"] / off["p99_ms"], 3),
        "rounds": results,
    }
