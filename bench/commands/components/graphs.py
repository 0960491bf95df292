"""`python -m bench graphs`: one exported model of two artifacts side by
side through ONNX Runtime, as Triton's CPU backend runs it (one thread),
one request shape at a time: what a model change costs per call."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from bench.output import console, write


def example_feeds(session: object, rows: int, count: int, seed: int = 0) -> list[dict]:
    """``count`` random inputs of ``rows`` rows for the graph's declared
    inputs: integers (item rows) below 1,000, floats in [0, 1)."""
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(count):
        feed = {}
        for spec in session.get_inputs():  # type: ignore[attr-defined]
            shape = [rows, *(d if isinstance(d, int) else 1 for d in spec.shape[1:])]
            if "int64" in spec.type:
                feed[spec.name] = rng.integers(1, 1000, shape).astype(np.int64)
            else:
                feed[spec.name] = rng.random(shape).astype(np.float32)
        feeds.append(feed)
    return feeds


def graphs(
    before: Annotated[Path, typer.Argument(help="An artifact directory.")],
    after: Annotated[Path, typer.Argument(help="Another, measured beside it.")],
    model: Annotated[str, typer.Option(help="user_tower, item_tower, ranker, ...")] = "user_tower",
    rows: Annotated[int, typer.Option(min=1, help="Rows a call (1: EmbedUser).")] = 1,
    calls: Annotated[int, typer.Option(min=100)] = 20_000,
    rounds: Annotated[int, typer.Option(min=2)] = 6,
    out: Path | None = None,
) -> None:
    """CPU microseconds per call of MODEL in BEFORE and AFTER, alternating
    rounds (the order swapped every other round)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    sessions = {
        side: ort.InferenceSession(
            str(path / model / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        for side, path in (("before", before), ("after", after))
    }
    feeds = example_feeds(sessions["before"], rows, 256)
    micros: dict[str, list[float]] = {"before": [], "after": []}
    for n in range(rounds):
        for side in ("before", "after") if n % 2 == 0 else ("after", "before"):
            started = time.process_time()
            for i in range(calls):
                sessions[side].run(None, feeds[i % len(feeds)])
            micros[side].append(round((time.process_time() - started) / calls * 1e6, 2))
    table = Table(title=f"{model}, {rows} row(s) a call, {calls} calls a round")
    for column in ("artifact", "CPU us per call, by round", "median"):
        table.add_column(column)
    for side, path in (("before", before), ("after", after)):
        values = micros[side]
        table.add_row(path.name, " ".join(f"{v:g}" for v in values), f"{np.median(values):.2f}")
    console.print(table)
    write(
        out,
        {
            "benchmark": "graphs",
            "model": model,
            "rows": rows,
            "before": str(before),
            "after": str(after),
            "cpu_us_per_call": micros,
            "median_after_over_before": round(
                float(np.median(micros["after"]) / np.median(micros["before"])), 4
            ),
        },
    )
