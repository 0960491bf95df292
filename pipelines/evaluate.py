"""Offline evaluation on the held-out split, through the exported ONNX models.

For each user: history = the whole training period, truth = the held-out
items, already-seen items are never recommended. Reported: recall@10/50/100
and NDCG@10 for popularity, item-kNN and EASE (the baselines, from
``baselines.py``; above 20,000 items sparse item-kNN and low-rank EASE,
``sparse_baselines.py``), exact two-tower retrieval, retrieval + ranking,
and retrieval + the int8 ranker. Above EVAL_USERS held-out users, a seeded
sample of that many.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pandas as pd

from pipelines import baselines, item_neighbours, sparse_baselines
from pipelines.dataset import MovieLens, Split, recent_items
from pipelines.inputs import Inputs
from pipelines.ranker_examples import seen_rows
from recserve_model.affinity import UserAffinity, vectors_or_zeros
from recserve_model.encoding import Encoder
from recserve_model.graphs import graph_feed
from recserve_model.sources import SOURCE_ANN, Sources, source_features

CUTOFFS = (10, 50, 100)
RERANK_DEPTH = 200
EVAL_USERS = 10_000  # held-out users evaluated; more are sampled down to this
EVAL_SEED = 7


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def metrics_at(ranked: np.ndarray, truth: set[int]) -> dict[str, float]:
    """ranked: item rows (or ids) best first. Recall and NDCG against the truth set."""
    hits = np.isin(ranked, list(truth))
    out = {f"recall@{k}": float(hits[:k].sum() / len(truth)) for k in CUTOFFS}
    top = np.zeros(10, dtype=bool)  # a shorter list scores no gain past its end
    top[: min(10, len(hits))] = hits[:10]
    gains = top / np.log2(np.arange(2, 12))
    ideal = (1 / np.log2(np.arange(2, 2 + min(10, len(truth))))).sum()
    out["ndcg@10"] = float(gains.sum() / ideal)
    return out


def ranker_scores(
    model: ort.InferenceSession,
    rows: np.ndarray,
    user_vector: np.ndarray,
    user_features: np.ndarray,
    inputs: Inputs,
    retrieval: np.ndarray,
    user_affinity: np.ndarray,
    sources: np.ndarray,
) -> np.ndarray:
    n = len(rows)
    feed = {
        "source_features": sources,
        "user_affinity": np.repeat(user_affinity[None, :], n, axis=0),
        "item_id": rows[:, None].astype(np.int64),
        "user_vector": np.repeat(user_vector[None, :], n, axis=0),
        "user_features": np.repeat(user_features[None, :], n, axis=0),
        "item_features": inputs.item_features[rows],
        "retrieval_score": retrieval[:, None].astype(np.float32),
    }
    return model.run(["score"], graph_feed(model.get_inputs(), feed))[0][:, 0]


def repeat_counts(train: pd.DataFrame, encoder: Encoder) -> dict[str, dict[int, int]]:
    """How many times each user bought each of their items, by row."""
    pairs = train.groupby(["user_id", "item_id"]).size()
    out: dict[str, dict[int, int]] = {}
    rows = encoder.item_rows(list(pairs.index.get_level_values("item_id")))
    users = pairs.index.get_level_values("user_id")
    for user, row, count in zip(users, rows.tolist(), pairs.tolist(), strict=True):
        out.setdefault(user, {})[row] = count
    return out


def sampled(users: list[str]) -> list[str]:
    """Every user up to EVAL_USERS; above, that many drawn (seeded): the
    figures' standard error is then about a third of a percent of NDCG."""
    if len(users) <= EVAL_USERS:
        return users
    drawn = np.random.default_rng(EVAL_SEED).choice(len(users), EVAL_USERS, replace=False)
    return [users[i] for i in sorted(drawn)]


class BaselineScores:
    """The item-item baselines' scores for each evaluated user: dense item-kNN
    and EASE where affordable (``sparse_baselines.dense_ok``; fit on the
    evaluated users' rows), else sparse item-kNN and low-rank EASE (fit on every training user's,
    scored a batch of users at a time): never items x items."""

    def __init__(
        self,
        train: pd.DataFrame,
        encoder: Encoder,
        users: list[str],
        ease_lambda: float = baselines.EASE_LAMBDA,
    ) -> None:
        self.dense = sparse_baselines.dense_ok(len(users), encoder.spec.num_rows)
        self.batch: tuple[int, dict[str, np.ndarray]] = (-1, {})
        if self.dense:
            self.history = baselines.interactions(train, encoder, users)
            self.weights = {
                "item_knn": baselines.item_knn(self.history),
                "ease": baselines.ease(self.history, ease_lambda),
            }
            return
        everyone = sparse_baselines.interactions(train, encoder, sorted(train["user_id"].unique()))
        self.rows = sparse_baselines.interactions(train, encoder, users)
        self.knn = sparse_baselines.ItemKnn(everyone)
        lam = ease_lambda
        self.factors = sparse_baselines.low_rank_ease(everyone, sparse_baselines.BASELINE_RANK, lam)

    def of(self, i: int) -> dict[str, np.ndarray]:
        """User ``i``'s scores by baseline: [num_rows] float32 each, fresh.
        Scored a batch of users at a time: one user's row at a time read
        the whole dense weight matrix per user (11 s of a 2,000-product
        shop's 22 s evaluation)."""
        start = i - i % sparse_baselines.SCORED_USERS
        if self.batch[0] != start:
            self.batch = (start, self.scored(slice(start, start + sparse_baselines.SCORED_USERS)))
        return {name: scores[i - start].copy() for name, scores in self.batch[1].items()}

    def scored(self, users: slice) -> dict[str, np.ndarray]:
        if self.dense:
            return {name: self.history[users] @ w for name, w in self.weights.items()}
        rows = self.rows[users]
        history_side, item_side = self.factors
        return {
            "item_knn": self.knn.scores(rows),
            "ease_low_rank": np.asarray(rows @ history_side) @ item_side.T,
        }


def served_candidates(
    sources: Sources | None,
    seeds: np.ndarray,
    own: np.ndarray,
    never: np.ndarray,
    retrieved: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """What the retriever serves a user besides the two-tower's ``retrieved``
    (``recserve_model.sources``): the rows, their source features, and the
    item-to-item source's own list (None without sources). ``never``: the
    rows no list may hold (inactive ones); ``own``: the user's, which only
    the repeat source offers."""
    if sources is None:
        bits = np.full(len(retrieved), SOURCE_ANN, np.uint8)
        return retrieved, source_features(np.zeros(len(retrieved), np.float32), bits), None
    user_scores = sources.user_scores(seeds)
    alone = user_scores.pool(own, max(CUTOFFS) + len(own))
    rows, bits = sources.candidates(
        user_scores, retrieved, own, lambda r: ~never[r], sources.repeat_pool(seeds)
    )
    features = source_features(user_scores.of(rows), bits, sources.repeat_scores(seeds, rows))
    return rows, features, alone[~never[alone]][: max(CUTOFFS)]


NEW_ITEMS = ":new"  # the metrics' suffix of the new-items-only protocol (repeat datasets)


def buy_again(seeds: np.ndarray, counts: dict[int, int], never: np.ndarray) -> np.ndarray:
    """The user's own rows by how often they were bought, then by recency
    (``seeds``: most recent first): "buy again by frequency"."""
    own = [row for row in seeds[seeds > 0].tolist() if not never[row]]
    return np.asarray(sorted(own, key=lambda row: -counts.get(row, 1)), np.int64)[: max(CUTOFFS)]


def baseline_lists(
    neighbours: BaselineScores | None, i: int, blocked: np.ndarray, popularity_order: np.ndarray
) -> list[tuple[str, np.ndarray]]:
    """User ``i``'s list of each baseline, ``blocked`` rows left out (none without baselines)."""
    if neighbours is None:
        return []
    lists = [("popularity", popularity_order[~blocked[popularity_order]][: max(CUTOFFS)])]
    for name, baseline in neighbours.of(i).items():
        baseline[blocked] = -np.inf
        lists.append((name, sparse_baselines.top(baseline, max(CUTOFFS))))
    return lists


def evaluate(
    split: Split,
    inputs: Inputs,
    vectors: np.ndarray,
    models: dict[str, Path],
    only_users: set[str] | None = None,
    inactive: Collection[str] = (),
    ease_lambda: float = baselines.EASE_LAMBDA,
    with_baselines: bool = True,
    repeat: bool = False,
) -> dict[str, dict[str, float]]:
    """Mean metrics over every held-out user, or over ``only_users`` of them;
    ``inactive`` items are never recommended, as in serving. Ranked lists
    rank what the retriever serves (``served_candidates``). Without
    baselines: the models' own lists alone (another artifact's, compared).
    Where items are bought again (``repeat``) a held-out repeat is a hit,
    ``buy_again`` is a baseline, and every list is also scored on the new
    items alone (its name + NEW_ITEMS, over the users who have some)."""
    encoder, train = inputs.encoder, split.train
    recent = recent_items(train)
    seen = seen_rows(train, encoder)
    truth = seen_rows(split.test, encoder)
    users = sampled(sorted(u for u in truth if only_users is None or u in only_users))
    totals = Totals(truth, seen if repeat else None, users)
    counts = repeat_counts(train, encoder) if repeat else {}
    user_tower = session(models["user_tower"])
    rankers = {"ranked": session(models["ranker"]), "ranked_int8": session(models["ranker_int8"])}
    feats = np.stack([inputs.user_features[u] for u in users])
    hist = np.stack([encoder.history(recent.get(u, [])) for u in users])
    u_vecs = user_tower.run(["user_vector"], {"user_features": feats, "history": hist})[0]
    artifact = models["ranker"].parents[1]
    u_aff = vectors_or_zeros(UserAffinity.load(artifact), hist)
    sources = Sources.load(artifact)
    seeds = item_neighbours.history_rows(train, encoder, users)
    popularity_order = np.argsort(-inputs.popularity, kind="stable")
    neighbours = BaselineScores(train, encoder, users, ease_lambda) if with_baselines else None
    add = totals.add
    never = np.zeros(len(vectors), dtype=bool)
    never[encoder.item_rows(sorted(inactive))] = True
    never[0] = True  # the out-of-vocabulary row
    for i, user in enumerate(users):
        blocked = never.copy()
        own = np.fromiter(seen.get(user, ()), dtype=np.int64)
        blocked[own] = True
        for name, ranked in baseline_lists(neighbours, i, blocked, popularity_order):
            add(name, ranked, user)
        if repeat and neighbours is not None:
            add("buy_again", buy_again(seeds[i], counts.get(user, {}), never), user)
        raw = vectors @ u_vecs[i]
        scores = np.where(blocked, -np.inf, raw)
        retrieved = sparse_baselines.top(scores, RERANK_DEPTH)
        add("two_tower", retrieved, user)
        retrieved, features, alone = served_candidates(sources, seeds[i], own, never, retrieved)
        if alone is not None:
            add("item_neighbours", alone, user)
        user_inputs = (u_vecs[i], feats[i], inputs, raw[retrieved], u_aff[i], features)
        for name, model in rankers.items():
            s = ranker_scores(model, retrieved, *user_inputs)
            add(name, retrieved[np.argsort(-s, kind="stable")], user)
    return totals.means


class Totals:
    """Each list's metrics summed over the users, by protocol: every held-out
    item is a hit; where ``seen`` is given (items bought again), also the
    new items alone (the list's name + NEW_ITEMS, over the users who have some)."""

    def __init__(
        self, truth: dict[str, set[int]], seen: dict[str, set[int]] | None, users: list[str]
    ) -> None:
        self.protocols = {"": truth}
        if seen is not None:
            self.protocols[NEW_ITEMS] = {u: truth[u] - seen.get(u, set()) for u in users}
        self.counted = {p: max(1, sum(1 for u in users if t[u])) for p, t in self.protocols.items()}
        self.means: dict[str, dict[str, float]] = {}

    def add(self, name: str, ranked: np.ndarray, user: str) -> None:
        for protocol, truth in self.protocols.items():
            if not truth[user]:
                continue
            out = self.means.setdefault(name + protocol, {})
            for key, value in metrics_at(ranked, truth[user]).items():
                out[key] = out.get(key, 0.0) + value / self.counted[protocol]


def evaluate_artifact(
    artifact: Path,
    raw_dir: Path,
    only_users: set[str] | None = None,
    dataset_dir: Path | None = None,
) -> dict[str, dict[str, float]]:
    """The same evaluation, of a built artifact (its ONNX files and vectors),
    on the demo dataset or ``dataset_dir`` (the one it was built from)."""
    from pipelines import dataset

    data = dataset.load_movielens(raw_dir, dataset_dir)
    split = dataset.temporal_split(data.interactions)
    return evaluate_artifact_on(artifact, data, split, only_users)


def evaluate_artifact_on(
    artifact: Path,
    data: MovieLens,
    split: Split,
    only_users: set[str] | None = None,
    with_baselines: bool = True,
) -> dict[str, dict[str, float]]:
    """A built artifact's evaluation on ``split`` of ``data``, which may be
    another build's: items the artifact never saw are out of its
    vocabulary, so they count as its misses (serving could still embed an
    upserted one), and users it never saw are embedded from their features
    and history, as it would serve them."""
    from pipelines import dataset
    from pipelines.inputs import encode_inputs
    from recserve_model.encoding import EncodingSpec

    spec = EncodingSpec.load(artifact / "encoding.json")
    inputs = encode_inputs(spec, dataset.feature_tables(data, split.train))
    table = pd.read_parquet(artifact / "item_vectors.parquet")
    vectors = np.zeros((spec.num_rows, spec.embedding_dim), dtype=np.float32)
    vectors[inputs.encoder.item_rows(list(table["item_id"]))] = np.stack(table["vector"])
    models = {
        name: artifact / name / "model.onnx" for name in ("user_tower", "ranker", "ranker_int8")
    }
    return evaluate(
        split,
        inputs,
        vectors,
        models,
        only_users,
        data.inactive,
        with_baselines=with_baselines,
        repeat=data.repeat,
    )


def as_table(metrics: dict[str, dict[str, float]]) -> pd.DataFrame:
    return pd.DataFrame(metrics).T.round(4)
