"""`python -m bench ranker`: its options, its tables and its JSON record.

Each part runs on its own: batching sweeps in one Triton per model, the
in-graph gather against a per-request table, Triton's resident memory with
an fp32 and an int8 table, and the affinity's cost per Score.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from bench.output import console, write

if TYPE_CHECKING:
    from recserve_model.encoding import EncodingSpec

PARTS = "batching,batching-user,gather,memory,affinity"


def ranker(
    data_dir: Annotated[Path, typer.Option(help="A data dir with built artifacts.")] = Path("data"),
    rows: Annotated[int, typer.Option(help="Rows of the big embedding table.")] = 5_000_000,
    seconds: float = 5.0,
    work_dir: Path = Path("build/bench-ranker"),
    parts: Annotated[str, typer.Option(help=f"Any of {PARTS}.")] = PARTS,
    out: Path | None = None,
) -> None:
    """Batching on vs off; in-graph gather vs per-request table; fp32 vs int8
    memory; what the affinity costs per Score, piece by piece."""
    from bench import ranker_bench as rb
    from recserve_model import artifacts
    from recserve_model.encoding import EncodingSpec

    artifact = artifacts.current(data_dir)
    spec = EncodingSpec.load(artifact / "encoding.json")
    wanted = set(parts.split(","))
    results: dict[str, object] = {"benchmark": "ranker", "rows": rows}
    sweeps = {
        # 200-candidate Score requests: 200 batch rows each.
        "batching": ("ranker", rb.QUEUE_DELAYS_US, rb.ranker_feed(spec, 200, spec.num_rows)),
        # EmbedUser requests: one row each.
        "batching-user": ("user_tower", (250, 1000), rb.user_feed(spec, 1, spec.num_rows)),
    }
    for part, (model, delays, feed) in sweeps.items():
        if part in wanted:
            results[part] = batching_part(artifact, work_dir / part, model, delays, feed, seconds)
    big_spec = EncodingSpec(spec.item_ids, spec.genres, spec.occupations, spec.embedding_dim)
    big = work_dir / "big"
    if wanted & {"gather", "memory"} and not (big / "ranker_int8" / "model.onnx").exists():
        console.print(f"building a {rows:,}-row ranker (fp32 and int8)...")
        rb.big_ranker_artifact(big_spec, rows, big)
    if "gather" in wanted:
        results["gather"] = rb.gather_comparison(big, big_spec, rows, calls=200)
        console.print(f"gather in graph vs table per request: {results['gather']}")
    if "memory" in wanted:
        (big / "encoding.json").write_text((artifact / "encoding.json").read_text())
        memory = memory_part(big, big_spec, rows, work_dir)
        console.print(f"Triton resident memory after touching every row (MB): {memory}")
        results["resident_memory_mb"] = memory
    if "affinity" in wanted:
        from bench.affinity_profile import profile

        results["affinity"] = profile(artifact, work_dir / "affinity")
        console.print(f"the affinity per Score, CPU microseconds: {results['affinity']}")
    write(out, results)


def batching_part(
    artifact: Path,
    work_dir: Path,
    model: str,
    delays: tuple[int, ...],
    feed: dict[str, Any],
    seconds: float,
) -> dict[str, object]:
    """One model without and with dynamic batching in one Triton, closed loop."""
    import shutil

    from bench import ranker_bench as rb
    from recserve_stack.triton_process import running_triton

    shutil.rmtree(work_dir, ignore_errors=True)
    repo = work_dir / "repository"
    models = rb.batching_repository(artifact, repo, artifact.name, model, delays)
    levels = (1, 4, 16, 64, 128, 256)  # past 64, batching still gains within p99 50 ms
    with running_triton(work_dir, repo, models) as server:
        sweep = asyncio.run(rb.batching_sweep(server.grpc_url, feed, seconds, levels, models))
    rows = len(next(iter(feed.values())))
    table = Table(title=f"Triton, {model}, {rows}-row requests, closed loop: req/s (p99 ms)")
    table.add_column("clients")
    for name in models:
        table.add_column(name.removeprefix(f"{model}_"))
    for i, level in enumerate(levels):
        table.add_row(
            str(level), *(f"{sweep[m][i]['rps']} ({sweep[m][i]['p99_ms']})" for m in models)
        )
    console.print(table)
    best = {m: rb.best_within(sweep[m]) for m in models}
    off = best[f"{model}_nobatch"]
    on_model = max((m for m in models if not m.endswith("_nobatch")), key=lambda m: best[m])
    ratio = round(best[on_model] / off, 2) if off else None
    console.print(f"best rps with p99 <= 50 ms: {best}; {on_model} vs off: {ratio}x")
    return {"sweep": sweep, "best_rps_p99_50ms": {**best, "best_on": on_model, "ratio": ratio}}


def memory_part(big: Path, big_spec: EncodingSpec, rows: int, work_dir: Path) -> dict[str, float]:
    """Triton's resident memory (MB) with the fp32 and the int8 big ranker, every row touched."""
    import shutil

    import psutil

    from bench import ranker_bench as rb
    from recserve_stack.triton_process import running_triton

    memory: dict[str, float] = {}
    for variant in ("ranker", "ranker_int8"):
        repo = work_dir / f"mem-{variant}" / "repository"
        shutil.rmtree(repo, ignore_errors=True)
        specs = rb.model_specs(affinity_rank=rb.BIG_RANK)
        model = next(m for m in specs if m.name == variant)
        rb.publish_model(repo, model, big, "big")
        with running_triton(work_dir / f"mem-{variant}", repo, [variant]) as server:
            asyncio.run(rb.touch_all_rows(server.grpc_url, variant, big_spec, rows))
            memory[variant] = rb.triton_rss_mb(psutil.Process(server.process.pid))
    memory["int8_over_fp32"] = round(memory["ranker_int8"] / memory["ranker"], 3)
    return memory
