"""Triton's memory, from its Prometheus endpoint, for the rollout judge.

On a GPU the fullest GPU's ``nv_gpu_memory_used_bytes / total``; on CPU the
host's ``nv_cpu_memory_used_bytes / total`` (Triton reports those for the
machine or container it runs in). None when the endpoint does not answer:
the judge then decides on the other figures and says memory is unknown.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.request

from prometheus_client import Gauge
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

MEMORY = Gauge("recserve_ranker_triton_memory_fraction", "Triton's memory in use (GPU or host).")


def memory_fraction(text: str) -> float | None:
    values: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values.setdefault(sample.name, []).append(sample.value)
    gpu_used, gpu_total = (
        values.get("nv_gpu_memory_used_bytes"),
        values.get("nv_gpu_memory_total_bytes"),
    )
    if gpu_used and gpu_total:
        return max(u / t for u, t in zip(gpu_used, gpu_total, strict=False) if t)
    used, total = values.get("nv_cpu_memory_used_bytes"), values.get("nv_cpu_memory_total_bytes")
    if used and total and total[0]:
        return used[0] / total[0]
    return None


def _fetch(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        body: bytes = response.read()
    return body.decode()


async def read_memory_fraction(url: str, timeout_s: float = 1.0) -> float | None:
    if not url:
        return None
    try:
        text = await asyncio.to_thread(_fetch, url, timeout_s)
    except OSError as exc:
        log.debug("Triton metrics unavailable: %s", exc)
        return None
    fraction = memory_fraction(text)
    if fraction is not None:
        MEMORY.set(fraction)
    return fraction
