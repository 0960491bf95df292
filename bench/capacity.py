"""A capacity model from measured CPU per request and stage service times.

Each stack process's CPU milliseconds per Recommend (``bench cpu`` or a
``bench sweep`` rate) times the request rate is the CPU it needs; at a
target utilisation (60%: room for bursts and a replica lost) that is its
cores. Our Python services run one event loop each, so one replica uses at
most one core: replicas = cores rounded up. Envoy and tritonserver are
multi-threaded: cores only. Triton on a GPU keeps its frontend's CPU
(tritonserver) while the model work of the python-backend stubs moves to the
GPU; GPU figures are projections (no GPU measured here), from an assumed
ranking throughput in rows per second, which the caller can change.
"""

from __future__ import annotations

import math

PYTHON_SERVICES = ("gateway", "features", "retriever", "ranker")
MULTI_THREADED = ("envoy", "tritonserver")
MODEL_WORK = "triton python stubs"


def plan(
    cpu_ms: dict[str, float],
    rates: tuple[int, ...],
    utilisation: float,
    rows_per_request: int,
    gpu_rows_per_s: float,
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []

    def add(component: str, ms: float, single_core: bool, note: str = "") -> None:
        row: dict[str, object] = {"component": component, "cpu_ms": ms, "note": note}
        for rate in rates:
            cores = rate * ms / 1000 / utilisation
            row[f"cores@{rate}"] = round(cores, 1)
            row[f"replicas@{rate}"] = max(1, math.ceil(cores)) if single_core else None
        rows.append(row)

    for name in PYTHON_SERVICES:
        add(name, cpu_ms[name], single_core=True)
    for name in MULTI_THREADED:
        add(name, cpu_ms[name], single_core=False)
    add("Triton model work on CPU (python backend + ONNX Runtime)", cpu_ms[MODEL_WORK], False)
    cpu_total = sum(cpu_ms[n] for n in (*PYTHON_SERVICES, *MULTI_THREADED, MODEL_WORK))
    add("total, CPU Triton", round(cpu_total, 2), False)
    add(
        "total, GPU Triton (projection)",
        round(cpu_total - cpu_ms[MODEL_WORK], 2),
        False,
        "model work moves to the GPU; tritonserver's frontend CPU stays",
    )
    gpu = {"component": "GPUs for the ranking model (projection)", "cpu_ms": None}
    for rate in rates:
        busy = rate * rows_per_request / gpu_rows_per_s
        gpu[f"cores@{rate}"] = None
        gpu[f"replicas@{rate}"] = max(1, math.ceil(busy / utilisation))
        gpu["note"] = (
            f"{rows_per_request} rows a request at an assumed {gpu_rows_per_s:,.0f} rows/s per GPU"
        )
    rows.append(gpu)
    return rows
