"""`python -m bench search`: the running stack's retriever, searched over
gRPC (mutual TLS, the operator's certificate) with user-like queries (the
mean of three random items' vectors of the served artifact), or with
``--users`` the artifact's users as the gateway asks for them (each one's
stored vector and seen items as the history that seeds the item-to-item
source), and, when asked, a filter on declared attributes: p50/p99 of
whole calls, one at a time. The served index at its real size and shape, where `bench retriever`
measures a synthetic one in process."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import numpy as np
import pyarrow.parquet as pq
import typer

from bench.output import console, write
from bench.services import new_histogram, percentiles
from recserve.retriever.v1 import retriever_pb2 as pb
from recserve.retriever.v1 import retriever_pb2_grpc
from recserve_kit import transport
from recserve_model import artifacts


def conditions(any_of: list[str], ranges: list[str]) -> list[pb.AttributeFilter]:
    """``name=a,b`` (any of) and ``name=low:high`` (a range; either end may be empty)."""
    out = []
    for spec in any_of:
        name, values = spec.split("=", 1)
        out.append(pb.AttributeFilter(name=name, any_of=values.split(",")))
    for spec in ranges:
        name, bounds = spec.split("=", 1)
        low, high = bounds.split(":", 1)
        condition = pb.AttributeFilter(name=name)
        if low:
            condition.min = float(low)
        if high:
            condition.max = float(high)
        out.append(condition)
    return out


def vector_column(path: Path) -> np.ndarray:
    table = pq.read_table(path, columns=["vector"])
    column = table.column("vector").combine_chunks()
    return column.values.to_numpy(zero_copy_only=False).reshape(len(table), -1)


def search(
    data_dir: Annotated[Path, typer.Option(help="The running stack's data directory.")] = Path(
        "data"
    ),
    target: Annotated[str, typer.Option(help="The retriever's port.")] = "127.0.0.1:50053",
    queries: int = 1000,
    k: int = 100,
    any_of: Annotated[
        list[str] | None, typer.Option("--any-of", help="NAME=v1,v2: an attribute's values.")
    ] = None,
    range_: Annotated[
        list[str] | None, typer.Option("--range", help="NAME=LOW:HIGH: a numeric range.")
    ] = None,
    users: Annotated[
        bool, typer.Option(help="Real users' vectors and histories (the candidate sources).")
    ] = False,
    out: Path | None = None,
) -> None:
    """The served retriever's latency, filtered or not (see the module)."""
    directory = artifacts.current(data_dir)
    vectors = vector_column(directory / "item_vectors.parquet")
    histories: list[list[str]] = []
    if users:
        vectors = vector_column(directory / "features" / "user_vectors.parquet")
        activity = pq.read_table(directory / "features" / "user_activity.parquet")
        histories = activity.column("seen_item_ids").to_pylist()
    rng = np.random.default_rng(7)
    flt = pb.SearchFilter(attributes=conditions(any_of or [], range_ or []))
    histogram, hits = new_histogram(), []
    tls = transport.Tls.load(data_dir / "tls", "operator")
    with transport.channel(target, tls) as channel:
        stub = retriever_pb2_grpc.RetrieverServiceStub(channel)
        for n in range(queries + 20):
            request = pb.SearchRequest(k=k, filter=flt, columns=True)
            if users:
                at = n % len(vectors)
                request.vector_f32 = vectors[at].astype(np.float32).tobytes()
                request.history_item_ids.extend(histories[at][:1000])
            else:
                query = vectors[rng.integers(len(vectors), size=3)].mean(axis=0)
                request.vector_f32 = query.astype(np.float32).tobytes()
            started = time.perf_counter()
            reply = stub.Search(request, timeout=10)
            if n >= 20:  # the first 20 warm the channel up
                histogram.record_value(max(1, int((time.perf_counter() - started) * 1e6)))
                hits.append(len(reply.item_ids))
    record = {
        "benchmark": "search",
        "artifact": directory.name,
        "items": pq.read_metadata(directory / "item_vectors.parquet").num_rows,
        "queries": queries,
        "k": k,
        "users": users,
        "filter": [str(c).replace("\n", " ") for c in flt.attributes],
        "mean_hits": float(np.mean(hits)),
        **percentiles(histogram),
    }
    console.print(record)
    write(out, record)
