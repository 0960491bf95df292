"""The report's three figures, drawn with matplotlib (Agg, no display).

- the tail: where the slowest 1% of requests spent their time, per group,
  against the gateway's budget and the SLO;
- the stages: each stage's own p50/p95/p99 against its cap;
- the CDF: end-to-end latency per kind of answer.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report.build import Report

COLOURS = {
    "features": "#4e79a7",
    "embed": "#f28e2b",
    "retrieve": "#59a14f",
    "rank": "#e15759",
    "other": "#9c755f",
    "queued": "#bab0ac",
    "envoy": "#76b7b2",
}
EXTRA = ("#edc948", "#b07aa1", "#ff9da7")
LABELS = {
    "other": "other in gateway",
    "queued": "queued before gateway",
    "envoy": "Envoy + network",
}


def colour(part: str, n: int) -> str:
    return COLOURS.get(part, EXTRA[n % len(EXTRA)])


def budget_lines(ax: Any, report: Report, vertical: bool = True) -> None:
    line = ax.axvline if vertical else ax.axhline
    b = report.budgets
    line(b.end_to_end_ms, color="#f28e2b", ls="--", lw=1.5, label=f"budget {b.end_to_end_ms:g} ms")
    line(b.slo_p99_ms, color="#d62728", ls="-", lw=1.5, label=f"SLO p99 {b.slo_p99_ms:g} ms")


def draw_tail(ax: Any, report: Report) -> None:
    rows = report.breakdowns
    for y, row in enumerate(rows):
        left = 0.0
        for n, (part, ms) in enumerate(row.parts.items()):
            label = LABELS.get(part, part) if y == 0 else None
            ax.barh(y, ms, left=left, color=colour(part, n), label=label, height=0.6)
            left += ms
        ax.plot([row.p99_ms], [y], marker="|", color="black", markersize=22, mew=2)
        ax.annotate(
            f"mean {row.tail_mean_ms:.1f} ms (p99 {row.p99_ms:.1f})",
            (left, y),
            xytext=(6, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(range(len(rows)), [f"{r.group}\n{r.tail} of {r.requests}" for r in rows])
    ax.invert_yaxis()
    budget_lines(ax, report)
    top = max([r.tail_mean_ms for r in rows] + [report.budgets.slo_p99_ms])
    ax.set_xlim(0, top * 1.35)
    ax.set_xlabel("ms, mean over the slowest 1% of requests (black tick: that group's p99)")
    ax.set_title("Where the slowest 1% spent their time")
    ax.legend(fontsize=7, ncol=9, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)


def draw_stages(ax: Any, report: Report) -> None:
    width = 0.25
    labels = []
    for n, row in enumerate(report.stages):
        quantiles = (("p50", row.p50_ms), ("p95", row.p95_ms), ("p99", row.p99_ms))
        for k, (q, ms) in enumerate(quantiles):
            x = n + (k - 1) * width
            ax.bar(x, ms, width, color=colour(row.stage, n), alpha=0.45 + 0.25 * k)
            ax.text(x, ms, q, ha="center", va="bottom", fontsize=6)
        label = row.stage
        if row.budget_ms != float("inf"):
            ax.hlines(row.budget_ms, n - 0.45, n + 0.45, color="#d62728", lw=2)
            label += f"\ncap {row.budget_ms:g} ms\n{row.over_budget:.1%} over"
        labels.append(label)
    ax.set_xticks(range(len(report.stages)), labels, fontsize=8)
    ax.set_ylabel("ms (each stage's own calls)")
    ax.set_title("Each stage against its cap (p50, p95, p99; red: cap)")
    ax.grid(axis="y", alpha=0.3)


def draw_cdf(ax: Any, report: Report) -> None:
    import numpy as np

    groups: dict[str, list[float]] = {"all": [r.e2e_ms for r in report.requests]}
    for r in report.requests:
        groups.setdefault(r.group, []).append(r.e2e_ms)
    for name, values in groups.items():
        ordered = np.sort(np.asarray(values))
        style = {"color": "black", "lw": 2.2} if name == "all" else {"lw": 1.3}
        ax.step(
            ordered,
            np.arange(1, len(ordered) + 1) / len(ordered),
            where="post",
            label=f"{name} ({len(ordered)})",
            **style,
        )
    ax.axhline(0.99, color="grey", ls=":", lw=1, label="99%")
    budget_lines(ax, report)
    ax.set_xlim(0, max(report.p99_ms, report.budgets.slo_p99_ms) * 1.15)
    ax.set_xlabel("end-to-end ms")
    ax.set_ylabel("fraction of the group's requests")
    ax.set_title("End-to-end latency, per kind of answer")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")


FIGURES: dict[str, tuple[Callable[[Any, Report], None], tuple[float, float]]] = {
    "tail": (draw_tail, (12, 3.7)),
    "stages": (draw_stages, (6.5, 3.9)),
    "cdf": (draw_cdf, (6.5, 3.9)),
}


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_png(name: str, report: Report) -> bytes:
    """One figure on its own, as PNG bytes (for the HTML page)."""
    plt = pyplot()
    draw, size = FIGURES[name]
    fig, ax = plt.subplots(figsize=size)
    draw(ax, report)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def write_png(report: Report, path: Path) -> Path:
    """The three figures on one image: the tail on top, stages and CDF below."""
    plt = pyplot()
    fig = plt.figure(figsize=(13, 8.5))
    grid = fig.add_gridspec(2, 2, height_ratios=(1, 1.2))
    draw_tail(fig.add_subplot(grid[0, :]), report)
    draw_stages(fig.add_subplot(grid[1, 0]), report)
    draw_cdf(fig.add_subplot(grid[1, 1]), report)
    fig.suptitle(report.title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
