"""Ranker benchmarks, side by side in one run.

1. Dynamic batching on vs off: the same ranker model twice in one Triton,
   one config without dynamic_batching; closed-loop clients sending
   200-candidate requests at rising concurrency; best throughput whose p99
   stays within 50 ms.
2. Embedding gather inside the graph (table resident, ids in) vs the
   anti-pattern of handing the model the whole table with every request
   (what a Python-side lookup that copies the table does), at 200 candidates
   with a 5,000,000 x 64 fp32 table (1.28 GB), in ONNX Runtime.
3. fp32 vs int8 table: resident memory of a Triton serving the 5M-row
   ranker, each variant in its own server.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import psutil
import torch
import tritonclient.grpc.aio as triton_aio
from tritonclient.grpc import InferInput

from bench.services import new_histogram, percentiles
from pipelines.export import RANKER_INPUTS, export_ranker
from pipelines.models import Int8Ranker, Ranker
from pipelines.triton_repo import cpu_config, model_specs, publish_model
from recserve_model.affinity import RANK as AFFINITY_RANK
from recserve_model.encoding import HISTORY_LEN, EncodingSpec
from recserve_model.sources import SOURCE_FEATURES


def ranker_feed(
    spec: EncodingSpec, n: int, rows: int, seed: int = 0, rank: int = AFFINITY_RANK
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "item_id": rng.integers(0, rows, (n, 1)).astype(np.int64),
        "user_vector": rng.standard_normal((n, spec.embedding_dim)).astype(np.float32) / 8,
        "user_features": rng.random((n, spec.user_dim)).astype(np.float32),
        "item_features": rng.random((n, spec.item_dim)).astype(np.float32),
        "retrieval_score": rng.random((n, 1)).astype(np.float32),
        # One user's side of the affinity, repeated on each candidate's row.
        "user_affinity": np.repeat(rng.standard_normal((1, rank)), n, axis=0).astype(np.float32),
        "source_features": rng.random((n, SOURCE_FEATURES)).astype(np.float32),
    }


def user_feed(spec: EncodingSpec, n: int, rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    """User-tower inputs: one row per EmbedUser request."""
    rng = np.random.default_rng(seed)
    return {
        "user_features": rng.random((n, spec.user_dim)).astype(np.float32),
        "history": rng.integers(1, rows, (n, HISTORY_LEN)).astype(np.int64),
    }


def inputs_for(feed: dict[str, np.ndarray]) -> list[InferInput]:
    out = []
    for name, array in feed.items():
        tensor = InferInput(name, list(array.shape), "INT64" if array.dtype == np.int64 else "FP32")
        tensor.set_data_from_numpy(array)
        out.append(tensor)
    return out


# -- 1. batching ---------------------------------------------------------------


QUEUE_DELAYS_US = (250, 500, 1000, 2000)


def batching_repository(
    artifact: Path,
    target: Path,
    version: str,
    model: str = "ranker",
    delays: tuple[int, ...] = QUEUE_DELAYS_US,
) -> list[str]:
    """The model without dynamic batching and with each queue delay; their names."""
    source = next(m for m in model_specs() if m.name == model)
    publish_model(target, source, artifact, version)
    base = cpu_config(source)
    names = [f"{model}_nobatch"]
    off = target / names[0]
    shutil.copytree(target / model, off)
    config = cpu_config(source, batching=False)
    (off / "config.pbtxt").write_text(config.replace(f'name: "{model}"', f'name: "{names[0]}"'))
    for delay in delays:
        name = f"{model}_q{delay}"
        shutil.copytree(target / model, target / name)
        config = base.replace(f'name: "{model}"', f'name: "{name}"').replace(
            f"max_queue_delay_microseconds: {source.cpu_queue_delay_us}",
            f"max_queue_delay_microseconds: {delay}",
        )
        (target / name / "config.pbtxt").write_text(config)
        names.append(name)
    return names


async def closed_loop(
    url: str, model: str, feed: dict[str, np.ndarray], clients: int, seconds: float
) -> dict[str, float]:
    histogram = new_histogram()
    done = 0
    async with triton_aio.InferenceServerClient(url) as client:
        stop = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            inputs = inputs_for(feed)
            while time.perf_counter() < stop:
                started = time.perf_counter()
                await client.infer(model, inputs)
                histogram.record_value(max(1, int((time.perf_counter() - started) * 1e6)))
                done += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - began
    return {"clients": clients, "rps": round(done / elapsed, 1), **percentiles(histogram)}


async def batching_sweep(
    url: str,
    feed: dict[str, np.ndarray],
    seconds: float,
    levels: tuple[int, ...],
    models: list[str],
) -> dict[str, list[dict[str, float]]]:
    out: dict[str, list[dict[str, float]]] = {}
    for model in models:
        await closed_loop(url, model, feed, 2, 1.0)  # warm-up
        out[model] = [await closed_loop(url, model, feed, c, seconds) for c in levels]
    return out


def best_within(points: list[dict[str, float]], p99_limit_ms: float = 50.0) -> float:
    ok = [p["rps"] for p in points if p["p99_ms"] <= p99_limit_ms]
    return max(ok, default=0.0)


# -- 2 and 3. the 5M-row table ------------------------------------------------------


BIG_RANK = 1


def big_ranker_artifact(spec: EncodingSpec, rows: int, out: Path) -> Path:
    """A ranker with a rows x dim random table, exported fp32 and int8."""
    torch.manual_seed(0)
    # Affinity at rank 1 (BIG_RANK): the id table is what this measures (at
    # rank 32 the two affinity factors of 5M rows would weigh 1.3 GB in fp32).
    model = Ranker(
        rows, spec.user_dim, spec.item_dim, spec.embedding_dim, affinity_rank=BIG_RANK
    ).eval()
    export_ranker(model, spec, out / "ranker" / "model.onnx")
    export_ranker(Int8Ranker(model), spec, out / "ranker_int8" / "model.onnx")
    return out


class TableAsInput(torch.nn.Module):
    """The anti-pattern: the table arrives with every request."""

    def __init__(self, ranker: Ranker) -> None:
        super().__init__()
        self.net = ranker.net
        self.features = ranker.features
        self.retrieval_weight = ranker.retrieval_weight

    def forward(
        self,
        table,
        item_id,
        user_vector,
        user_features,
        item_features,
        retrieval_score,
        affinity,
        sources,
    ):
        rows = table[item_id.squeeze(-1)]
        # The rank-1 affinity's gather costs next to nothing beside the table.
        x = self.features(
            rows, user_vector, user_features, item_features, retrieval_score, affinity, sources
        )
        return self.net(x) + self.retrieval_weight * retrieval_score


def gather_comparison(big: Path, spec: EncodingSpec, rows: int, calls: int) -> dict[str, object]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    resident = ort.InferenceSession(str(big / "ranker" / "model.onnx"), options)
    feed = ranker_feed(spec, 200, rows, rank=BIG_RANK)
    in_graph = new_histogram()
    for _ in range(calls):
        started = time.perf_counter()
        resident.run(None, feed)
        in_graph.record_value(max(1, int((time.perf_counter() - started) * 1e6)))
    # The anti-pattern, same math: the table is a graph input, copied in per call.
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(big / "ranker" / "model.onnx"))
    shape = [rows, spec.embedding_dim]
    table_init = next(i for i in model.graph.initializer if list(i.dims) == shape)
    table = numpy_helper.to_array(table_init, base_dir=str(big / "ranker"))
    ranker = Ranker(1, spec.user_dim, spec.item_dim, spec.embedding_dim)
    anti = TableAsInput(ranker).eval()
    path = big / "table_as_input" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    from torch.export import Dim

    batch = Dim("batch", min=1, max=1 << 20)
    program = torch.onnx.export(
        anti,
        (torch.from_numpy(table[:4]), *(torch.from_numpy(feed[n][:3]) for n in RANKER_INPUTS)),
        input_names=["table", *RANKER_INPUTS],
        output_names=["score"],
        dynamic_shapes={
            "table": {0: Dim("rows", min=2, max=1 << 24)},
            **{n: {0: batch} for n in RANKER_INPUTS},
        },
        dynamo=True,
    )
    program.save(str(path), external_data=True)
    session = ort.InferenceSession(str(path), options)
    per_request = new_histogram()
    for _ in range(max(3, calls // 50)):
        started = time.perf_counter()
        copied = table.copy()  # what a per-request Python-side lookup pays
        session.run(None, {"table": copied, **feed})
        per_request.record_value(max(1, int((time.perf_counter() - started) * 1e6)))
    a, b = percentiles(in_graph), percentiles(per_request)
    return {"in_graph": a, "table_per_request": b, "p50_ratio": round(b["p50_ms"] / a["p50_ms"], 1)}


def triton_rss_mb(process: psutil.Process) -> float:
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return round(total / 2**20, 1)


async def touch_all_rows(url: str, model: str, spec: EncodingSpec, rows: int) -> None:
    """Scores every row once, so the whole table is resident before measuring.

    ONNX Runtime maps external weights; untouched rows are not in memory, and
    a catalogue in production touches them all sooner or later.
    """
    batch = 4096
    feed = ranker_feed(spec, batch, rows, rank=BIG_RANK)  # the big model only
    async with triton_aio.InferenceServerClient(url) as client:
        for start in range(0, rows, batch):
            ids = np.arange(start, min(start + batch, rows), dtype=np.int64)[:, None]
            part = {k: v[: len(ids)] for k, v in feed.items()}
            part["item_id"] = ids
            await client.infer(model, inputs_for(part))
