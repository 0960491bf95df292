"""A load sweep through Envoy: each rate open loop, one after another, with
the latency percentile curves of every rate on one plot and the stage
shares (p50 of each gateway stage over full answers) per rate beside it.

Requests ask for per-stage timings (``debug``), so stage shares come from
the answers themselves, every request, no trace sampling. Whether any stack
process died is read from the process table before and after each rate.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.cpu_profile import cpu_seconds, stack_processes
from bench.load import LoadResult, run_load

STAGES = ("features", "embed", "retrieve", "rank", "merge")


def run_rate(target: str, rate: float, duration_s: float) -> tuple[LoadResult, dict[str, object]]:
    processes = stack_processes()
    before = {name: {p.pid for p in found} for name, found in processes.items()}
    cpu_before = {name: cpu_seconds(p) for name, p in processes.items()}
    result = asyncio.run(run_load(target, rate, duration_s, debug=True))
    after = {name: {p.pid for p in found} for name, found in stack_processes().items()}
    died = sorted(name for name in before if not before[name] <= after.get(name, set()))
    cpu_ms = {
        name: round(1000 * (cpu_seconds(p) - cpu_before[name]) / max(result.sent, 1), 2)
        for name, p in processes.items()
    }
    row = {
        **result.summary(),
        "stage_p50_ms": result.stage_ms(50),
        "stage_p99_ms": result.stage_ms(99),
        "percentiles_ms": result.percentile_curve(),
        "processes_died": died,
        "cpu_ms_per_request": cpu_ms,
        "total_cpu_ms_per_request": round(sum(cpu_ms.values()), 2),
    }
    return result, row


def plot(rows: list[dict[str, object]], out: Path) -> Path:
    """Percentile curves of every rate (log-scaled tail, as HdrHistogram plots
    them) and the stage shares at p50 per rate, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (curves, shares) = plt.subplots(1, 2, figsize=(13, 5))
    for row in rows:
        points = row["percentiles_ms"]
        assert isinstance(points, list)
        x = [1 / (1 - p / 100) for p, _ in points]
        curves.plot(x, [ms for _, ms in points], marker="o", label=f"{row['rate_rps']:.0f}/s")
    ticks = [50, 90, 99, 99.9, 99.99]
    curves.set_xscale("log")
    curves.set_xticks([1 / (1 - p / 100) for p in ticks], [f"{p}%" for p in ticks])
    curves.set_xlabel("percentile")
    curves.set_ylabel("latency through Envoy, ms")
    curves.set_title("Recommend latency by percentile, each rate")
    curves.grid(alpha=0.3, which="both")
    curves.legend(title="open-loop rate")
    labels = [f"{row['rate_rps']:.0f}/s" for row in rows]
    bottom = np.zeros(len(rows))
    for stage in STAGES:
        values = np.array(
            [float(row["stage_p50_ms"].get(stage, 0.0)) for row in rows]  # type: ignore[union-attr]
        )
        shares.bar(labels, values, bottom=bottom, label=stage)
        bottom += values
    shares.plot(
        labels, [row["p50_ms"] for row in rows], "k_", markersize=30, label="end to end p50"
    )
    shares.set_ylabel("ms (p50 of each stage, full answers)")
    shares.set_title("Where the time goes, per rate")
    shares.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
