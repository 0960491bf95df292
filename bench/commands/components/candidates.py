"""`python -m bench candidates`: a user's candidates made as the retriever
makes them for a Recommend (``search_candidates``), in this process, on
the served artifact's index, users and histories (each user's stored
vector, and their seen items as the history, at most 1,000). It reports
CPU per call and how much of it goes where:

- the HNSW query (the nearest neighbours, the history excluded by the filter);
- the exact query (which of the item-to-item, popular and repeat pools
  pass the request's filter, and their two-tower scores);
- each query counted with its filter built and its answer read back;
- the rest: the sources' numpy and Python (the pools, the user's
  neighbour scores), the request's checks, the candidates put together.

``bench search --users`` times the same work as whole gRPC calls to a
running stack; this one splits it, without a stack. The index is built
afresh under a temporary directory: a running stack holds its own shard.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pyarrow.parquet as pq
import typer
from rich.table import Table

from bench.commands.components.search import vector_column
from bench.output import console, write
from recserve_model import artifacts

PARTS = ("hnsw_query", "exact_query")
HISTORY = 1000  # the gateway sends at most this many seen items


def users_of(directory: Path, limit: int) -> list[tuple[bytes, list[str]]]:
    """(vector bytes, seen items) of the artifact's users that have both."""
    features = directory / "features"
    vectors = vector_column(features / "user_vectors.parquet").astype(np.float32)
    ids = pq.read_table(features / "user_vectors.parquet", columns=["user_id"]).column(0)
    seen = pq.read_table(features / "user_activity.parquet", columns=["user_id", "seen_item_ids"])
    history = dict(zip(seen.column(0).to_pylist(), seen.column(1).to_pylist(), strict=True))
    out = [
        (vector.tobytes(), history[user][:HISTORY])
        for user, vector in zip(ids.to_pylist(), vectors, strict=True)
        if user in history
    ]
    return out[:limit] if limit else out


@contextmanager
def retriever_of(directory: Path) -> Iterator[Any]:
    """A retriever in this process over ``directory`` (an artifact), its
    index built afresh in a temporary directory, removed after."""
    from services.retriever.config import RetrieverSettings
    from services.retriever.domain import Retriever
    from services.retriever.server import generations_for

    work = Path(tempfile.mkdtemp(prefix="bench-candidates-"))
    try:
        (work / "artifacts").symlink_to(directory.parent.resolve(), target_is_directory=True)
        settings = RetrieverSettings(data_dir=work)
        retriever = Retriever(settings, generations_for(settings))
        if not retriever.open_current():
            asyncio.run(retriever.refresh_from_artifacts())
        try:
            yield retriever
        finally:
            retriever.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def timed_store(store: Any, spent: dict[str, float]) -> None:
    """Counts the CPU of each of the store's searches, by kind."""
    search = store.search

    def counted(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return search(*args, **kwargs)
        finally:
            part = "exact_query" if kwargs.get("exact") else "hnsw_query"
            spent[part] += time.process_time() - started

    store.search = counted


def candidates(
    data_dir: Annotated[Path, typer.Option(help="Where the served artifact is.")] = Path("data"),
    users: Annotated[int, typer.Option(help="The artifact's first N users; 0: all.")] = 0,
    k: Annotated[int, typer.Option(help="Candidates asked for (the gateway's default).")] = 200,
    rounds: int = 3,
    out: Path | None = None,
) -> None:
    """CPU per candidate search, and its parts (see the module)."""
    from services.retriever.candidate_sources import search_candidates
    from services.retriever.store import SearchFilter

    directory = artifacts.current(data_dir)
    requests = users_of(directory, users)
    with retriever_of(directory) as retriever:
        spent = dict.fromkeys(PARTS, 0.0)
        timed_store(retriever._store(), spent)
        per_round = []
        for _ in range(rounds + 1):  # the first warms the index up, unrecorded
            spent.update(dict.fromkeys(PARTS, 0.0))
            started = time.process_time()
            for vector, history in requests:
                search_candidates(retriever, vector, k, SearchFilter(), history)
            total = time.process_time() - started
            per_round.append({"total": total, **spent})
    report(directory.name, requests, k, per_round[1:], out)


def report(artifact: str, requests: list, k: int, per_round: list[dict], out: Path | None) -> None:
    calls = len(requests)
    ms = {
        part: [r[part] / calls * 1000 for r in per_round] for part in ("total", *PARTS)
    }  # fmt: skip
    ms["rest"] = [t - h - e for t, h, e in zip(ms["total"], *(ms[p] for p in PARTS), strict=True)]
    table = Table(title=f"CPU per candidate search ({calls} users, k={k}), ms by round")
    table.add_column("part")
    for n in range(len(per_round)):
        table.add_column(f"round {n + 1}", justify="right")
    table.add_column("share", justify="right")
    total = float(np.mean(ms["total"]))
    for part, values in ms.items():
        share = float(np.mean(values)) / total if total else 0.0
        table.add_row(part, *(f"{v:.3f}" for v in values), f"{share:.0%}")
    console.print(table)
    record = {
        "benchmark": "candidates",
        "artifact": artifact,
        "users": calls,
        "k": k,
        "mean_history": float(np.mean([len(h) for _, h in requests])),
        "cpu_ms_per_call": ms,
    }
    write(out, record)
