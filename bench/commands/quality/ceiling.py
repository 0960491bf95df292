"""`python -m bench shop-ceiling`: how far above the baselines a generated
shop allows. The generator (pipelines/shop.py) draws each session's
category from the shopper's liked ones and its products by popularity
within that category, so the list that knows how the data was made is
"the shopper's category shares times each product's share of its
category", both fit on the build's training period (one pseudo count per
category). It is scored on the build's own held-out split, on the users
the build's evaluation takes, beside the baselines the gate compares with:
a model that does not know the generator should not expect to beat it by
much. Beside it: the same list with the shares fit on every event type
(views too, which the build does not learn from), and, where the
generator wrote the dataset (its ``generated.json``) and items are not
bought again, the "oracle": the list from the tastes the generator drew
rather than fit ones, the most a list can know."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from bench.output import console, write

METRICS = ("recall@10", "ndcg@10")


def first_category_rows(items, encoder) -> np.ndarray:
    """Each item row's first category as an index (-1 where unknown)."""
    names = sorted({c[0] for c in items["genres"] if len(c)})
    index = {name: i for i, name in enumerate(names)}
    out = np.full(encoder.spec.num_rows, -1, dtype=np.int64)
    rows = encoder.item_rows(list(items["item_id"]))
    out[rows] = [index[c[0]] if len(c) else -1 for c in items["genres"]]
    return out


def generator_scores(
    train, rows: np.ndarray, counts: np.ndarray, category: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Each user's category shares (one pseudo count a category) and each
    row's share of its category's training interactions (``rows``: the
    training interactions' item rows; ``counts``: each row's count)."""
    n = int(category.max()) + 1
    known = category >= 0
    by_category = np.bincount(category[known], weights=counts[known], minlength=n)
    within = np.where(known, counts / np.maximum(by_category[np.maximum(category, 0)], 1), 0.0)
    shares = {}
    for user, user_rows in train.assign(row=rows).groupby("user_id")["row"]:
        own = category[user_rows.to_numpy()]
        own = own[own >= 0]
        shares[user] = (np.bincount(own, minlength=n) + 1.0) / (len(own) + n)
    return shares, within


def shares_from_every_event(events, test, items) -> dict[str, np.ndarray]:
    """Each held-out user's category shares (one pseudo count a category)
    from every event type before their held-out part, views too (which the
    build does not learn from), less the first held-out item's own view
    (one funnel step before its click)."""
    from pipelines import shop

    first = test.groupby("user_id")["timestamp"].min()
    events = events[events["user_id"].isin(first.index)]
    events = events[events["timestamp"] < events["user_id"].map(first) - shop.FUNNEL_STEP_S]
    names = sorted({c[0] for c in items["genres"] if len(c)})
    index = {name: i for i, name in enumerate(names)}
    category_of = {
        i: index[c[0]] for i, c in zip(items["item_id"], items["genres"], strict=True) if len(c)
    }
    category = events["item_id"].map(category_of).dropna().astype(int)
    return {
        user: (np.bincount(own.to_numpy(), minlength=len(names)) + 1.0) / (len(own) + len(names))
        for user, own in category.groupby(events.loc[category.index, "user_id"])
    }


def oracle_scores(tastes, items, encoder) -> Callable[[str], np.ndarray]:
    """A user's scores by row: the chance that one of their views is each
    item, from the tastes the generator drew (what no fit on the data can
    know better), for shoppers ``s1``... and products ``p1``..."""
    index = np.array([int(i[1:]) - 1 for i in items["item_id"]])
    rows = np.asarray(encoder.item_rows(list(items["item_id"])))
    first = np.full(len(tastes.view_share), -1)
    first[index] = [int(c[0][1:]) if len(c) else -1 for c in items["genres"]]

    def scores(user: str) -> np.ndarray:
        out = np.zeros(encoder.spec.num_rows)
        out[rows] = tastes.view_chances(int(user[1:]) - 1, first)[index]
        return out

    return scores


def ceiling(dataset_dir: Path, raw_dir: Path, ease_lambda: float) -> dict:
    from pipelines import dataset, shop
    from pipelines.evaluate import CUTOFFS, BaselineScores, baseline_lists, metrics_at, sampled
    from pipelines.inputs import build_spec
    from pipelines.ranker_examples import seen_rows
    from recserve_data import load
    from recserve_model.encoding import Encoder

    data = dataset.load_movielens(raw_dir, dataset_dir)
    split = dataset.temporal_split(data.interactions)
    encoder = Encoder(build_spec(data, 8))
    seen, truth = seen_rows(split.train, encoder), seen_rows(split.test, encoder)
    users = sampled(sorted(truth))
    category = first_category_rows(data.items, encoder)
    rows = np.asarray(encoder.item_rows(list(split.train["item_id"])))
    counts = np.bincount(rows, minlength=encoder.spec.num_rows).astype(np.float64)
    shares, within = generator_scores(split.train, rows, counts, category)
    never = np.zeros(encoder.spec.num_rows, dtype=bool)
    never[encoder.item_rows(sorted(data.inactive))] = True
    never[0] = True
    popularity_order = np.argsort(-counts, kind="stable")
    neighbours = BaselineScores(split.train, encoder, users, ease_lambda)
    every = shares_from_every_event(load(dataset_dir).interactions, split.test, data.items)
    lists_by = {
        "generator": lambda user: shares[user][np.maximum(category, 0)] * within,
        "generator_every_event": lambda user: every[user][np.maximum(category, 0)] * within,
    }
    drawn = shop.tastes(dataset_dir)
    if drawn is not None:
        lists_by["oracle"] = oracle_scores(drawn, data.items, encoder)
    totals: dict[str, dict[str, float]] = {}
    for i, user in enumerate(users):
        blocked = never.copy()
        blocked[list(seen.get(user, ()))] = True
        lists = baseline_lists(neighbours, i, blocked, popularity_order)
        for name, scores_of in lists_by.items():
            scores = scores_of(user)
            scores[blocked | (category < 0)] = -np.inf
            lists.append((name, np.argsort(-scores, kind="stable")[: max(CUTOFFS)]))
        for name, ranked in lists:
            out = totals.setdefault(name, {})
            for key, value in metrics_at(ranked, truth[user]).items():
                out[key] = out.get(key, 0.0) + value / len(users)
    return {"dataset": data.title, "users": len(users), "ease_lambda": ease_lambda, **totals}


def shop_ceiling(
    dataset_dir: Annotated[Path, typer.Option("--dataset", help="A generated shop's dataset.")],
    data_dir: Annotated[Path, typer.Option(help="Where the demo's raw data is.")] = Path("data"),
    ease_lambda: Annotated[float, typer.Option(help="EASE's L2 weight (the build's gate's).")] = (
        300.0
    ),
    out: Path | None = None,
) -> None:
    """The generator's own list against the baselines, on the build's split."""
    result = ceiling(dataset_dir, data_dir / "raw", ease_lambda)
    names = [k for k in result if isinstance(result[k], dict)]
    baselines = [n for n in names if n not in ("generator", "generator_every_event", "oracle")]
    best = max(baselines, key=lambda n: result[n]["ndcg@10"])
    table = Table(title=f"{result['dataset']}: {result['users']} held-out users")
    for column in ("list", *METRICS, "/ best baseline"):
        table.add_column(column, justify="right")
    for name in names:
        ratio = result[name]["ndcg@10"] / max(result[best]["ndcg@10"], 1e-12)
        table.add_row(name, *(f"{result[name][k]:.4f}" for k in METRICS), f"{ratio:.3f}")
    console.print(table)
    write(out, {"benchmark": "shop_ceiling", "best_baseline": best, **result})
