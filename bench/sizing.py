"""Replica counts and HPA bounds per Deployment for a target rate.

``bench.capacity.plan`` turns the measured CPU per request of each process
into cores and single-core replicas at a target utilisation; this turns
that into what each Kubernetes Deployment runs for a target rate R (the
planned peak, in Recommend/s):

- the HPA's minimum serves ``floor`` x R (half, by default) without any
  scaling, and is never below two, so a node lost or drained leaves a
  replica serving;
- the HPA's maximum serves ``headroom`` x R (twice, by default: a flash
  sale's burst over the planned peak);
- every HPA holds CPU at the model's utilisation (60% of the request), and
  a Python service's pod requests the one core its single event loop can
  use, so a replica at the HPA's target is a replica of the model;
- Envoy's pods have 2 cores (``--concurrency 2``); Triton on a GPU has one
  GPU a pod, and as many pods as the model's GPU projection or its
  frontend's CPU (4 cores a pod) needs, whichever is more.

``render_hpas`` writes the production overlay's HPAs from this, so the
overlay's bounds are this function's output (tests/kubernetes holds them
equal).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.table import Table

from bench.capacity import PYTHON_SERVICES, plan
from bench.output import console, write

HA_FLOOR = 2
PYTHON_POD_CORES = 1  # one event loop (bench/capacity.py)
ENVOY_POD_CORES = 2
TRITON_GPU_POD_CORES = 4  # the GPU component's CPU request for tritonserver
# Past a quarter of the gateway's in-flight bound (RECSERVE_GATEWAY_MAX_IN_FLIGHT,
# 64) a replica is queueing: scale out long before it starts to shed.
GATEWAY_IN_FLIGHT_TARGET = 16
# Four times the longest batching window of the GPU configs (500 us, the user
# tower's): past it requests wait for busy model instances, not for a batch.
TRITON_QUEUE_US_TARGET = 2000
GPU_PROJECTION = "GPUs for the ranking model (projection)"
SIZED_FOR = "recserve.io/sized-for-rps"


@dataclass(frozen=True)
class Size:
    deployment: str
    minimum: int
    maximum: int
    pod: str  # what one pod is
    basis: str  # what the count is made of

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def measured_cpu(source: dict, rate: float | None = None) -> tuple[dict[str, float], float]:
    """CPU ms per request and the rate it was measured at, from `bench cpu`
    or `bench sweep` JSON (a sweep: the row at ``rate``)."""
    if "rows" in source:
        rows = source["rows"]
        chosen = next((r for r in rows if rate is None or float(r["rate_rps"]) == rate), None)
        if chosen is None:
            raise ValueError(f"no sweep row at {rate}/s: {[r['rate_rps'] for r in rows]}")
    else:
        chosen = source
    return chosen["cpu_ms_per_request"], float(chosen["rate_rps"])


def _rows(cpu_ms: dict[str, float], rates: tuple[int, ...], utilisation: float, **gpu) -> dict:
    return {str(r["component"]): r for r in plan(cpu_ms, rates, utilisation, **gpu)}


def size(
    cpu_ms: dict[str, float],
    rate: int,
    utilisation: float = 0.6,
    floor: float = 0.5,
    headroom: float = 2.0,
    rows_per_request: int = 200,
    gpu_rows_per_s: float = 2_000_000.0,
) -> list[Size]:
    """HPA minimum and maximum per Deployment for a planned peak of ``rate``/s."""
    low, high = max(1, round(rate * floor)), max(1, round(rate * headroom))
    rows = _rows(
        cpu_ms,
        (low, high),
        utilisation,
        rows_per_request=rows_per_request,
        gpu_rows_per_s=gpu_rows_per_s,
    )

    def bounds(at_low: float, at_high: float) -> tuple[int, int]:
        minimum = max(HA_FLOOR, math.ceil(at_low))
        return minimum, max(minimum, math.ceil(at_high))

    out = []
    for name in PYTHON_SERVICES:
        row = rows[name]
        minimum, maximum = bounds(row[f"replicas@{low}"], row[f"replicas@{high}"])
        out.append(
            Size(name, minimum, maximum, f"{PYTHON_POD_CORES} core", f"{row['cpu_ms']} ms CPU/req")
        )
    envoy = rows["envoy"]
    minimum, maximum = bounds(
        envoy[f"cores@{low}"] / ENVOY_POD_CORES, envoy[f"cores@{high}"] / ENVOY_POD_CORES
    )
    out.append(
        Size("envoy", minimum, maximum, f"{ENVOY_POD_CORES} cores", f"{envoy['cpu_ms']} ms/req")
    )
    # Triton on GPUs: one GPU a pod, and enough pods that tritonserver's own
    # CPU (the frontend, which stays on the CPU) fits each pod's cores.
    gpus = rows[GPU_PROJECTION]
    frontend = rows["tritonserver"]

    def triton_pods(at: int) -> int:
        return max(
            gpus[f"replicas@{at}"], math.ceil(frontend[f"cores@{at}"] / TRITON_GPU_POD_CORES)
        )

    minimum, maximum = bounds(triton_pods(low), triton_pods(high))
    basis = (
        f"GPU projection {gpus[f'replicas@{high}']} ({rows_per_request} rows/req at "
        f"{gpu_rows_per_s:,.0f} rows/s a GPU) and {frontend[f'cores@{high}']} frontend cores "
        f"at the maximum"
    )
    out.append(Size("triton", minimum, maximum, f"1 GPU, {TRITON_GPU_POD_CORES} cores", basis))
    return out


def _metrics(deployment: str, utilisation: float) -> list[dict]:
    cpu = {
        "type": "Resource",
        "resource": {
            "name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": round(utilisation * 100)},
        },
    }
    custom = {
        # Requests in flight per gateway (prometheus-adapter, infra/kubernetes/adapter).
        "gateway": ("recserve_gateway_in_flight", GATEWAY_IN_FLIGHT_TARGET),
        # Triton's queue time per request, in microseconds (prometheus-adapter).
        "triton": ("triton_queue_duration_us_per_request", TRITON_QUEUE_US_TARGET),
    }
    metrics = [cpu]
    if deployment in custom:
        name, target = custom[deployment]
        metrics.append(
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": name},
                    "target": {"type": "AverageValue", "averageValue": str(target)},
                },
            }
        )
    return metrics


BEHAVIOR = {
    # Up at once (double, or four pods, every 30 s); down slowly, after five
    # minutes of lower load, a quarter a minute.
    "scaleUp": {
        "stabilizationWindowSeconds": 0,
        "selectPolicy": "Max",
        "policies": [
            {"type": "Percent", "value": 100, "periodSeconds": 30},
            {"type": "Pods", "value": 4, "periodSeconds": 30},
        ],
    },
    "scaleDown": {
        "stabilizationWindowSeconds": 300,
        "policies": [{"type": "Percent", "value": 25, "periodSeconds": 60}],
    },
}


def render_hpas(sizes: list[Size], rate: int, utilisation: float, command: str) -> str:
    """The production overlay's HPAs as YAML, headed by the command that wrote them."""
    documents = []
    for s in sizes:
        documents.append(
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": s.deployment, "annotations": {SIZED_FOR: str(rate)}},
                "spec": {
                    "scaleTargetRef": {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": s.deployment,
                    },
                    "minReplicas": s.minimum,
                    "maxReplicas": s.maximum,
                    "metrics": _metrics(s.deployment, utilisation),
                    "behavior": BEHAVIOR,
                },
            }
        )
    header = (
        f"# Written by `{command}`; do not edit, run it again.\n"
        f"# HPA bounds for a planned peak of {rate:,} Recommend/s (bench/sizing.py).\n"
    )
    body = "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in documents)
    return header + body


def table(rate: int, sizes: list[Size]) -> Table:
    out = Table(title=f"HPA bounds for a planned peak of {rate:,}/s")
    for column in ("Deployment", "pod", "min", "max", "from"):
        out.add_column(column, justify="right" if column in ("min", "max") else "left")
    for s in sizes:
        out.add_row(s.deployment, s.pod, str(s.minimum), str(s.maximum), s.basis)
    return out


def sizing(
    measured: Annotated[Path, typer.Option(help="JSON from `bench cpu` or `bench sweep`.")],
    rate: Annotated[
        list[int] | None, typer.Option(help="Planned peak, Recommend/s (repeat for more).")
    ] = None,
    measured_rate: Annotated[
        float | None, typer.Option(help="With a sweep: which rate's CPU to use.")
    ] = None,
    utilisation: Annotated[float, typer.Option(help="CPU held by every HPA.")] = 0.6,
    floor: Annotated[float, typer.Option(help="Share of the peak served at the minimum.")] = 0.5,
    headroom: Annotated[float, typer.Option(help="Burst over the peak at the maximum.")] = 2.0,
    rows_per_request: int = 200,
    gpu_rows_per_s: Annotated[
        float, typer.Option(help="Assumed ranking rows/s of one GPU (a projection).")
    ] = 2_000_000.0,
    write_hpas: Annotated[
        Path | None, typer.Option(help="Write the HPAs for the (single) rate to this file.")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Write the record as JSON.")] = None,
) -> None:
    """Replica counts and HPA bounds per Deployment for 1,000 and 10,000 Recommend/s."""
    rates = rate or [1000, 10000]
    cpu_ms, at = measured_cpu(json.loads(measured.read_text()), measured_rate)
    results = {}
    for r in rates:
        sizes = size(cpu_ms, r, utilisation, floor, headroom, rows_per_request, gpu_rows_per_s)
        console.print(table(r, sizes))
        results[str(r)] = [s.as_dict() for s in sizes]
    console.print(
        f"from CPU measured at {at:.0f}/s ({measured}), {utilisation:.0%} utilisation, "
        f"minimum at {floor:.0%} and maximum at {headroom:g}x the peak, at least {HA_FLOOR} each"
    )
    if write_hpas is not None:
        if len(rates) != 1:
            raise typer.BadParameter("--write-hpas takes exactly one --rate")
        chosen = {
            "measured-rate": (measured_rate, None),
            "utilisation": (utilisation, 0.6),
            "floor": (floor, 0.5),
            "headroom": (headroom, 2.0),
            "rows-per-request": (rows_per_request, 200),
            "gpu-rows-per-s": (gpu_rows_per_s, 2_000_000.0),
        }
        options = "".join(f" --{k} {v:g}" for k, (v, default) in chosen.items() if v != default)
        command = (
            f"python -m bench sizing --measured {measured} --rate {rates[0]}{options} "
            f"--write-hpas {write_hpas}"
        )
        sizes = size(
            cpu_ms, rates[0], utilisation, floor, headroom, rows_per_request, gpu_rows_per_s
        )
        write_hpas.write_text(render_hpas(sizes, rates[0], utilisation, command))
        console.print(f"wrote {write_hpas}")
    payload = {"benchmark": "sizing", "source": str(measured), "measured_at_rps": at}
    write(out, {**payload, "rates": results})
