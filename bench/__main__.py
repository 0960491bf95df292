"""`python -m bench ...`: benchmarks. Each prints a table and writes JSON."""

from __future__ import annotations

import asyncio
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()


def machine() -> str:
    cpus = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return f"{platform.machine()}, {cpus} cores, Python {platform.python_version()}"


def write(out: Path | None, payload: dict[str, object]) -> None:
    payload = {
        "machine": machine(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(sys.argv),
        **payload,
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(payload, indent=2))
    console.print_json(json.dumps(payload))


@app.command()
def load(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    rate: Annotated[float, typer.Option(help="Requests per second.")] = 200.0,
    duration: Annotated[float, typer.Option(help="Seconds.", max=600)] = 30.0,
    k: int = 20,
    out: Path | None = None,
) -> None:
    """Open-loop Recommend load through Envoy (constant arrival rate)."""
    from bench.load import run_load

    result = asyncio.run(run_load(target, rate, duration, k=k))
    table = Table(title=f"Recommend at {rate:.0f}/s for {duration:.0f}s via {target}")
    for column in ("p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "errors", "degraded"):
        table.add_column(column)
    s = result.summary()
    table.add_row(
        str(s["p50_ms"]),
        str(s["p90_ms"]),
        str(s["p99_ms"]),
        str(s["p999_ms"]),
        str(sum(result.errors.values())),
        str(sum(result.degraded.values())),
    )
    console.print(table)
    write(out, {"benchmark": "recommend_open_loop", **s})


@app.command()
def idle(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    requests: int = 2000,
    out: Path | None = None,
) -> None:
    """Latency of an idle stack: one client, closed loop, through Envoy."""
    from bench.load import run_closed

    histogram, degraded = asyncio.run(run_closed(target, requests))
    row = {
        "requests": requests,
        **{
            f"p{p}_ms".replace(".", ""): round(histogram.get_value_at_percentile(p) / 1000, 2)
            for p in (50, 90, 99, 99.9)
        },
        "max_ms": round(histogram.get_max_value() / 1000, 2),
        "degraded": dict(degraded),
    }
    console.print(row)
    write(out, {"benchmark": "idle_latency", **row})


@app.command()
def answers(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    users: int = 943,
    out: Annotated[Path, typer.Option(help="Where to write every user's answer.")] = Path(
        "build/bench/answers.json"
    ),
    compare: Annotated[Path | None, typer.Option(help="Another build's answers file.")] = None,
) -> None:
    """Every user's top 20 (ids, scores); with --compare, how many differ."""
    from bench.load import answers as collect

    got = asyncio.run(collect(target, users))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(got))
    if compare is not None:
        other = {u: [tuple(x) for x in v] for u, v in json.loads(compare.read_text()).items()}
        ids_differ = sum(1 for u in got if [i for i, _ in got[u]] != [i for i, _ in other[u]])
        scores_differ = sum(1 for u in got if got[u] != other[u])
        console.print(
            f"{len(got)} users: ranked ids differ for {ids_differ}, ids or scores "
            f"(to 5 decimals) for {scores_differ}"
        )


@app.command()
def quality(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    data_dir: Annotated[Path, typer.Option(help="The stack's data dir.")] = Path("data"),
    out: Path | None = None,
) -> None:
    """Recall and NDCG of Recommend through the live stack for every held-out
    user, next to the offline evaluation of the artifact it serves."""
    from bench.quality import compare

    result = compare(target, data_dir.resolve())
    table = Table(title=f"{result['users']} held-out users, artifact {result['artifact']}")
    for column in ("metric", "offline", "live (Envoy)", "difference"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    offline, live, diff = result["offline"], result["live"], result["relative_difference"]
    assert isinstance(offline, dict) and isinstance(live, dict) and isinstance(diff, dict)
    for key in offline:
        table.add_row(key, f"{offline[key]:.4f}", f"{live[key]:.4f}", f"{diff[key]:+.2%}")
    console.print(table)
    console.print(
        f"degraded answers: {result['degraded_answers']}; served by {result['served_versions']}"
    )
    write(out, {"benchmark": "live_quality", **result})


@app.command("cold-start")
def cold_start(
    data_dir: Annotated[Path, typer.Option(help="A data dir with the raw data.")] = Path("data"),
    folds: Annotated[int, typer.Option(min=2, help="Each user held out once.")] = 5,
    seed: int = 7,
    out: Path | None = None,
) -> None:
    """Users held out of training entirely, served from attributes: vs popularity."""
    from bench.cold_start import run as run_cold

    result = run_cold(data_dir / "raw", folds, seed)
    for protocol in ("last 10 ratings", "first 10 ratings"):
        rows = result[protocol]
        assert isinstance(rows, dict)
        table = Table(title=f"cold-start users ({result['users']}, {folds} folds), {protocol}")
        for column in ("served from", "recall@10", "recall@100", "ndcg@10"):
            table.add_column(column, justify="left" if column == "served from" else "right")
        for name, metrics in rows.items():
            table.add_row(
                name, *(f"{metrics[k]:.4f}" for k in ("recall@10", "recall@100", "ndcg@10"))
            )
        console.print(table)
    console.print(f"served / popularity recall@10 by fold (first 10): {result['per_fold']}")
    write(out, {"benchmark": "cold_start", **result})


@app.command()
def features(
    data_dir: Annotated[Path, typer.Option(help="A data dir with built artifacts.")] = Path("data"),
    redis_url: Annotated[str, typer.Option(help="A running Redis (host:port); empty skips.")] = "",
    calls: int = 2000,
    out: Path | None = None,
) -> None:
    """Features service latency: SQLite vs Redis, item cache cold vs warm."""
    from bench.features_bench import run

    rows = run(data_dir.resolve(), redis_url, calls)
    table = Table(title="features service via gRPC (sequential calls)")
    for column in ("store", "cache", "rpc", "p50 ms", "p99 ms", "max ms"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            str(r["store"]),
            str(r["cache"]),
            str(r["rpc"]),
            str(r["p50_ms"]),
            str(r["p99_ms"]),
            str(r["max_ms"]),
        )
    console.print(table)
    write(out, {"benchmark": "features", "calls": calls, "rows": rows})


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


@app.command()
def ranker(
    data_dir: Annotated[Path, typer.Option(help="A data dir with built artifacts.")] = Path("data"),
    rows: Annotated[int, typer.Option(help="Rows of the big embedding table.")] = 5_000_000,
    seconds: float = 5.0,
    work_dir: Path = Path("build/bench-ranker"),
    parts: Annotated[
        str, typer.Option(help="Any of batching,batching-user,gather,memory,affinity.")
    ] = "batching,batching-user,gather,memory,affinity",
    out: Path | None = None,
) -> None:
    """Batching on vs off; in-graph gather vs per-request table; fp32 vs int8
    memory; what the affinity costs per Score, piece by piece."""
    import shutil

    import psutil
    from recserve_model import artifacts
    from recserve_model.encoding import EncodingSpec

    from bench import ranker_bench as rb
    from recserve_stack.triton_process import running_triton

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
        memory: dict[str, float] = {}
        (big / "encoding.json").write_text((artifact / "encoding.json").read_text())
        for variant in ("ranker", "ranker_int8"):
            repo = work_dir / f"mem-{variant}" / "repository"
            shutil.rmtree(repo, ignore_errors=True)
            specs = rb.model_specs(big_spec, affinity_rank=rb.BIG_RANK)
            model = next(m for m in specs if m.name == variant)
            rb.publish_model(repo, model, big, "big")
            with running_triton(work_dir / f"mem-{variant}", repo, [variant]) as server:
                asyncio.run(rb.touch_all_rows(server.grpc_url, variant, big_spec, rows))
                memory[variant] = rb.triton_rss_mb(psutil.Process(server.process.pid))
        memory["int8_over_fp32"] = round(memory["ranker_int8"] / memory["ranker"], 3)
        console.print(f"Triton resident memory after touching every row (MB): {memory}")
        results["resident_memory_mb"] = memory
    if "affinity" in wanted:
        from bench.affinity_profile import profile

        results["affinity"] = profile(artifact, work_dir / "affinity")
        console.print(f"the affinity per Score, CPU microseconds: {results['affinity']}")
    write(out, results)


@app.command()
def retriever(
    points: Annotated[int, typer.Option(max=5_000_000)] = 1_000_000,
    compare_points: int = 100_000,
    queries: int = 200,
    work_dir: Path = Path("build/bench-retriever"),
    out: Path | None = None,
) -> None:
    """Qdrant Edge HNSW p50/p99 and recall@100 by ef; vs qdrant-client local mode."""
    from rich.progress import Progress

    from bench import retriever_bench as rb
    from pipelines.synthetic import write_synthetic

    items = work_dir / "synthetic" / "item_vectors.parquet"
    if not items.exists():
        write_synthetic(items.parent, points, 1000, 64, 7, console)
    efs = (100, 128, 256, 512)  # below k=100 Qdrant searches with ef = k anyway
    with Progress(console=console) as progress:
        big = rb.run(items, work_dir / "edge-big", points, queries, efs, progress)
        small = rb.run(items, work_dir / "edge-small", compare_points, queries, (128,), progress)
        # Local mode is brute force in Python (seconds per filtered query): fewer queries.
        local = rb.run_local_mode(items, compare_points, min(queries, 50), 128, progress)
    table = Table(title=f"Qdrant Edge, {points:,} x 64, k=100 (in-process search)")
    for column in ("filter", "ef", "p50 ms", "p99 ms", "recall@100"):
        table.add_column(column)
    for name in ("edge_unfiltered", "edge_filtered"):
        for row in big[name]:  # type: ignore[union-attr]
            table.add_row(
                name.removeprefix("edge_"),
                str(row["ef"]),
                str(row["p50_ms"]),
                str(row["p99_ms"]),
                str(row["recall_at_100"]),
            )
    console.print(table)
    console.print({"at": compare_points, "edge": small, "qdrant_client_local": local})
    write(
        out,
        {
            "benchmark": "retriever",
            "large": big,
            "compare_edge": small,
            "compare_local_mode": local,
        },
    )


@app.command()
def report(
    traces: Annotated[Path, typer.Option(help="Folder of OTLP JSON span files.")] = Path(
        "data/traces"
    ),
    tempo: Annotated[str, typer.Option(help="Tempo base URL; read spans there instead.")] = "",
    charts_dir: Path = Path("build/report"),
    out: Path | None = None,
) -> None:
    """Latency budget by stage from the spans: where does p99 go?"""
    from dataclasses import asdict

    from bench.report import (
        default_budgets,
        request_totals,
        spans_from_files,
        spans_from_tempo,
        stage_report,
        write_charts,
    )

    spans = spans_from_tempo(tempo) if tempo else spans_from_files(sorted(traces.glob("*.jsonl")))
    e2e, rows = stage_report(spans, default_budgets())
    table = Table(
        title=f"{e2e['requests']} requests; end to end p50 {e2e['p50_ms']:.1f} ms, "
        f"p99 {e2e['p99_ms']:.1f} ms"
    )
    for column in (
        "stage",
        "count",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "share@p50",
        "share@p99",
        "budget ms",
        "over budget",
    ):
        table.add_column(column)
    for r in rows:
        table.add_row(
            r.stage,
            str(r.count),
            f"{r.p50_ms:.2f}",
            f"{r.p95_ms:.2f}",
            f"{r.p99_ms:.2f}",
            f"{r.share_p50:.0%}",
            f"{r.share_p99:.0%}",
            f"{r.budget_ms:.0f}",
            str(r.over_budget),
        )
    console.print(table)
    charts = write_charts(e2e, rows, request_totals(spans), charts_dir)
    console.print(f"charts: {', '.join(str(c) for c in charts)}")
    if out is not None:
        write(
            out,
            {"report": "latency_budget", "end_to_end": e2e, "stages": [asdict(r) for r in rows]},
        )


@app.command()
def rescore(
    data_dir: Path = Path("data"),
    users: Annotated[int, typer.Option(min=1)] = 50_000,
    candidates: Annotated[int, typer.Option(min=1, max=1000)] = 200,
    master: str = "local[*]",
    work_dir: Path = Path("build/bench-rescore"),
    out: Path | None = None,
) -> None:
    """Spark re-scoring: pairs per second end to end, fp32 vs int8, 100M projection."""
    from bench.rescore_bench import run

    result = run(data_dir, work_dir, users, candidates, master, console)
    table = Table(title=f"re-scoring {users:,} users x {candidates} candidates ({master})")
    for column in ("ranker", "pairs", "seconds", "pairs/s", "minutes for 100M pairs"):
        table.add_column(column)
    for name in ("fp32", "int8"):
        row = result[name]
        assert isinstance(row, dict)
        table.add_row(
            name,
            f"{row['pairs']:,}",
            str(row["seconds"]),
            f"{row['pairs_per_second']:,}",
            str(row["minutes_for_100M_pairs"]),
        )
    console.print(table)
    write(out, {"benchmark": "rescore", **result})


@app.command()
def cpu(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    rate: float = 50.0,
    duration: Annotated[float, typer.Option(max=600)] = 20.0,
    out: Path | None = None,
) -> None:
    """CPU milliseconds per request of each stack process under open-loop load."""
    from bench.cpu_profile import run as run_cpu

    result = run_cpu(target, rate, duration)
    table = Table(title=f"CPU per request at {rate:.0f}/s for {duration:.0f}s")
    table.add_column("process")
    table.add_column("CPU ms / request", justify="right")
    per_request = result["cpu_ms_per_request"]
    assert isinstance(per_request, dict)
    for name, ms in per_request.items():
        table.add_row(name, f"{ms:.2f}")
    table.add_row(
        "total (stack, without the load generator)", f"{result['total_cpu_ms_per_request']:.2f}"
    )
    console.print(table)
    write(out, {"benchmark": "cpu_per_request", **result})


@app.command()
def shadow(
    rate: float = 100.0,
    duration: Annotated[float, typer.Option(max=600)] = 20.0,
    rounds: Annotated[int, typer.Option(min=1)] = 3,
    percent: Annotated[float, typer.Option(min=0, max=100)] = 10.0,
    candidate: Annotated[str, typer.Option(help="Default: the current artifact again.")] = "",
    out: Path | None = None,
) -> None:
    """Shadow scoring at PERCENT vs off, alternating rounds on the running stack."""
    from bench.shadow import run as run_shadow
    from recserve_kit.config import load_settings
    from recserve_stack.settings import StackSettings

    result = run_shadow(load_settings(StackSettings), rate, duration, rounds, percent, candidate)
    table = Table(title=f"shadow {percent:g}% vs off at {rate:.0f}/s, {rounds} rounds each")
    table.add_column("figure (median of rounds)")
    table.add_column("off", justify="right")
    table.add_column(f"shadow {percent:g}%", justify="right")
    off, on = result["off"], result["on"]
    assert isinstance(off, dict) and isinstance(on, dict)
    for name in off:
        table.add_row(name, f"{off[name]:g}", f"{on[name]:g}")
    console.print(table)
    cpu_ratio, p99_ratio = result["cpu_ratio_on_over_off"], result["p99_ratio_on_over_off"]
    console.print(f"CPU on/off {cpu_ratio}, p99 on/off {p99_ratio}")
    write(out, {"benchmark": "shadow_scoring", **result})


@app.command()
def hop(
    data_dir: Annotated[Path, typer.Option(help="A data dir with built artifacts.")] = Path("data"),
    service: Annotated[str, typer.Option(help="Whose health check to call.")] = "features",
    address: str = "127.0.0.1:50052",
    triton_url: str = "127.0.0.1:8001",
    calls: int = 4000,
    tls: Annotated[
        bool, typer.Option(help="Call with <data-dir>/tls/operator.pem (the stack's default).")
    ] = True,
    out: Path | None = None,
) -> None:
    """CPU floor of one gRPC hop and one Triton call, against the running stack."""
    from recserve_model import artifacts
    from recserve_model.encoding import EncodingSpec

    from bench.hop_cost import run as run_hop
    from recserve_kit.transport import Tls

    spec = EncodingSpec.load(artifacts.current(data_dir) / "encoding.json")
    operator = Tls.load(data_dir / "tls", "operator") if tls else None
    result = run_hop(address, service, triton_url, spec.user_dim, calls, operator)
    table = Table(title=f"CPU per call that does no work ({calls:,} calls, 8 at a time)")
    for column in ("hop", "server us", "client us", "total us", "calls/s"):
        table.add_column(column, justify="left" if column == "hop" else "right")
    for name in ("service_hop", "triton_hop"):
        row = result[name]
        assert isinstance(row, dict)
        table.add_row(
            name, *(str(row[k]) for k in ("server_us", "client_us", "total_us", "calls_per_s"))
        )
    console.print(table)
    console.print(
        f"floor per Recommend (4 service calls + 2 Triton calls): "
        f"{result['floor_cpu_ms_per_recommend']} ms of CPU"
    )
    write(out, {"benchmark": "hop_cost", **result})


@app.command()
def sweep(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    rates: Annotated[str, typer.Option(help="Comma-separated req/s.")] = "50,100,150,200,260,520",
    duration: Annotated[float, typer.Option(help="Seconds per rate.", max=600)] = 30.0,
    long_rate: Annotated[float, typer.Option(help="This rate runs long_duration.")] = 260.0,
    long_duration: Annotated[float, typer.Option(max=600)] = 60.0,
    chart: Path = Path("docs/img/load-sweep.png"),
    out: Path | None = None,
) -> None:
    """Open-loop load at each rate in turn: percentiles, degraded, errors, full
    answers/s, stage shares and CPU per request; one chart of every rate."""
    from bench.load import wait_for_full_answer
    from bench.sweep import plot, run_rate

    rows: list[dict[str, object]] = []
    for n, rate in enumerate(float(r) for r in rates.split(",")):
        if n:
            wait_for_full_answer(target)  # the previous rate's backlog has drained
        seconds = long_duration if rate == long_rate else duration
        console.print(f"{rate:.0f}/s for {seconds:.0f} s ...")
        _, row = run_rate(target, rate, seconds)
        rows.append(row)
    table = Table(title=f"Recommend through {target}, open loop, one rate after another")
    for column in (
        "rate",
        "s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "p99.9 ms",
        "errors",
        "degraded",
        "full/s",
        "CPU ms/req",
        "died",
    ):
        table.add_column(column, justify="right")
    for row in rows:
        errors = sum(row["errors"].values())  # type: ignore[union-attr]
        degraded = sum(row["degraded"].values())  # type: ignore[union-attr]
        table.add_row(
            f"{row['rate_rps']:.0f}",
            f"{row['duration_s']:.0f}",
            str(row["p50_ms"]),
            str(row["p90_ms"]),
            str(row["p99_ms"]),
            str(row["p999_ms"]),
            str(errors),
            f"{degraded} ({100 * degraded / max(int(row['sent']), 1):.1f}%)",  # type: ignore[call-overload]
            str(row["full_answers_per_s"]),
            str(row["total_cpu_ms_per_request"]),
            ",".join(row["processes_died"]) or "none",  # type: ignore[arg-type]
        )
    console.print(table)
    console.print(f"chart: {plot(rows, chart)}")
    write(out, {"benchmark": "load_sweep", "rows": rows})


@app.command()
def burst(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    sizes: Annotated[str, typer.Option(help="Comma-separated burst sizes.")] = "8,32,64",
    repeats: int = 5,
    quiet: Annotated[float, typer.Option(help="Idle seconds before each burst.")] = 2.0,
    out: Path | None = None,
) -> None:
    """Bursts of concurrent Recommend calls after a quiet spell: shed, degraded, errors."""
    from bench.burst import run as run_bursts

    rows = run_bursts(target, tuple(int(s) for s in sizes.split(",")), repeats, quiet)
    table = Table(title=f"Bursts after {quiet:.0f} s idle, through {target}")
    for column in ("size", "shed", "other degraded", "errors", "slowest ms"):
        table.add_column(column, justify="right")
    for row in rows:
        degraded = row["degraded"]
        assert isinstance(degraded, dict)
        other = {k: v for k, v in degraded.items() if k != "DEGRADED_REASON_SHED"}
        table.add_row(
            str(row["size"]),
            str(row["shed"]),
            str(sum(other.values())),
            str(sum(row["errors"].values())),  # type: ignore[union-attr]
            str(row["max_ms"]),
        )
    console.print(table)
    write(out, {"benchmark": "bursts", "quiet_s": quiet, "rows": rows})


@app.command()
def chaos(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    admin: Annotated[str, typer.Option(help="Envoy's admin URL.")] = "http://127.0.0.1:9901",
    kill: Annotated[str, typer.Option(help="Comma-separated processes, in turn.")] = ",".join(
        ("gateway", "features", "retriever", "ranker", "tritonserver", "envoy")
    ),
    rate: float = 100.0,
    duration: Annotated[float, typer.Option(help="Seconds of load per kill.", max=120)] = 15.0,
    out: Path | None = None,
) -> None:
    """SIGKILL each stack process in turn under open-loop load: what clients saw."""
    from bench.chaos import run as run_chaos

    rows = run_chaos(target, admin, tuple(kill.split(",")), rate, duration)
    table = Table(title=f"SIGKILL under {rate:.0f} req/s through {target}, 2 s into the load")
    for column in ("killed", "errors", "degraded", "last non-full answer, s after kill", "p99 ms"):
        table.add_column(column)
    for row in rows:
        if row["killed"] == "envoy":
            table.add_row("envoy", "", "", f"ready again after {row['ready_again_after_s']} s", "")
            continue
        table.add_row(
            str(row["killed"]),
            str(sum(row["errors"].values())),  # type: ignore[union-attr]
            str(sum(row["degraded"].values())),  # type: ignore[union-attr]
            str(row["last_not_full_after_s"]),
            str(row["p99_ms"]),
        )
    console.print(table)
    write(out, {"benchmark": "chaos", "rate": rate, "duration_s": duration, "rows": rows})


@app.command()
def capacity(
    measured: Annotated[Path, typer.Option(help="JSON from `bench cpu` or `bench sweep`.")],
    rate: Annotated[float, typer.Option(help="With a sweep: which rate's CPU to use.")] = 200.0,
    utilisation: float = 0.6,
    rows_per_request: int = 200,
    gpu_rows_per_s: Annotated[
        float, typer.Option(help="Assumed ranking rows/s of one GPU (a projection).")
    ] = 2_000_000.0,
    out: Path | None = None,
) -> None:
    """Cores and replicas per component for 1,000 and 10,000 Recommend/s."""
    from bench.capacity import plan

    source = json.loads(measured.read_text())
    if "rows" in source:
        chosen = next(r for r in source["rows"] if float(r["rate_rps"]) == rate)
    else:
        chosen = source
    cpu_ms = chosen["cpu_ms_per_request"]
    rates = (1000, 10000)
    rows = plan(cpu_ms, rates, utilisation, rows_per_request, gpu_rows_per_s)
    table = Table(
        title=f"Capacity at {utilisation:.0%} utilisation, from CPU measured at "
        f"{chosen['rate_rps']:.0f}/s ({measured})"
    )
    table.add_column("component")
    table.add_column("CPU ms/req", justify="right")
    for r in rates:
        table.add_column(f"cores @{r:,}/s", justify="right")
        table.add_column(f"replicas @{r:,}/s", justify="right")
    for row in rows:
        cells = [str(row["component"]), "" if row["cpu_ms"] is None else str(row["cpu_ms"])]
        for r in rates:
            cores, replicas = row[f"cores@{r}"], row[f"replicas@{r}"]
            cells += [
                "" if cores is None else str(cores),
                "" if replicas is None else str(replicas),
            ]
        table.add_row(*cells)
    console.print(table)
    for row in rows:
        if row.get("note"):
            console.print(f"{row['component']}: {row['note']}")
    write(out, {"benchmark": "capacity", "source": str(measured), "rows": rows})


if __name__ == "__main__":
    app()
