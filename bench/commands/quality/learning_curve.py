"""`python -m bench learning-curve`: at what size a shop's learned parts pay.

Generates the same shop (one catalogue, one seed) with more and more
shoppers, builds each through the real pipeline (the gate included) and
reports, on each build's own held-out split, the baselines, each candidate
source alone (the two-tower's nearest neighbours, item-to-item) and the
served list, with the blend the ranker started from: where the towers'
retrieval weight turns non-zero and the two-tower alone closes on the
baselines, the towers pay.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write

SHOWN = ("popularity", "item_knn", "ease", "item_neighbours", "two_tower", "ranked")


def one_size(work: Path, items: int, users: int, events_per_user: int, seed: int) -> dict:
    from pipelines.build import QualityGateError, build
    from pipelines.shop import ShopSize, write_shop

    root = work / f"shop-{items}-{users}"
    shutil.rmtree(root, ignore_errors=True)
    size = ShopSize(items=items, users=users, events=users * events_per_user)
    dataset = write_shop(root / "dataset", size, seed=seed)
    started = time.monotonic()
    try:
        result = build(root / "data", dataset_dir=dataset)
        metrics, gate, directory = result.metrics, "passes", result.directory
    except QualityGateError as refused:
        metrics, gate = refused.metrics, "refused"
        # Built, not published: the only artifact of this fresh data dir.
        (directory,) = [p for p in (root / "data" / "artifacts").iterdir() if p.is_dir()]
    seconds = time.monotonic() - started
    training = json.loads((directory / "ranker_training.json").read_text())
    return {
        "items": items,
        "users": users,
        "events": size.events,
        "build_s": round(seconds, 1),
        "gate": gate,
        "blend": training["initial_blend"]["chosen"],
        "ndcg@10": {name: round(metrics[name]["ndcg@10"], 4) for name in SHOWN if name in metrics},
    }


def learning_curve(
    users: Annotated[str, typer.Option(help="Shoppers per build, comma-separated.")] = (
        "500,2000,10000,40000"
    ),
    items: Annotated[int, typer.Option(help="Products in every build's catalogue.")] = 2_000,
    events_per_user: Annotated[int, typer.Option(help="Events per shopper, about.")] = 150,
    work_dir: Annotated[Path, typer.Option(help="Where the shops and builds go.")] = Path(
        "/tmp/recserve-learning-curve"
    ),
    seed: int = 7,
    out: Path | None = None,
) -> None:
    """Builds the generated shop at each size; each list's NDCG@10 on its split."""
    rows = []
    for count in (int(u) for u in users.split(",")):
        rows.append(one_size(work_dir, items, count, events_per_user, seed))
        console.print(rows[-1])
    table = Table(title=f"NDCG@10 on each build's held-out split ({items} products)")
    for column in ("shoppers", "events", *SHOWN, "ranked / best baseline", "blend r/a/c", "gate"):
        table.add_column(column, justify="right")
    for row in rows:
        ndcg = row["ndcg@10"]
        best = max(ndcg.get(n, 0.0) for n in ("popularity", "item_knn", "ease"))
        blend = row["blend"]
        table.add_row(
            f"{row['users']:,}",
            f"{row['events']:,}",
            *(f"{ndcg[n]:.4f}" if n in ndcg else "-" for n in SHOWN),
            f"{ndcg['ranked'] / best:.3f}" if best else "-",
            f"{blend['retrieval']:g}/{blend['affinity']:g}/{blend['neighbours']:g}",
            row["gate"],
        )
    console.print(table)
    write(out, {"benchmark": "learning_curve", "sizes": rows})
