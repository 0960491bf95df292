"""What runs on the executors: retrieval and ranking of a batch of users.

``ModelBundle`` is loaded once per executor process (checksums verified) and
cached; ``score_users`` is pure numpy + ONNX Runtime over a whole Arrow
batch: one user-tower run, one matrix product against the item vectors, and
the ranker over every (user, candidate) pair of the batch in large chunks.
The ranker's inputs are built exactly as the online ranker builds them (the
same ``Encoder``), so batch and online scores agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pandas as pd
import pyarrow as pa

from recserve_model import artifacts
from recserve_model.affinity import UserAffinity, vectors_or_zeros
from recserve_model.attribute_features import texts_from_json
from recserve_model.encoding import OOV_ROW, Encoder, EncodingSpec
from recserve_model.graphs import graph_feed
from recserve_model.sources import SOURCE_ANN, Sources, source_features

RANKER_CHUNK = 8_192  # pairs per ONNX Runtime call (faster than larger chunks, measured)


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    # Spark runs one task per core; each task's model uses its own core.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@dataclass
class ModelBundle:
    version: str
    encoder: Encoder
    user_tower: ort.InferenceSession
    ranker: ort.InferenceSession
    item_vectors: np.ndarray  # [rows, dim], by embedding row
    item_features: np.ndarray  # [rows, item_dim], encoded as the online ranker does
    eligible: np.ndarray  # [rows] bool: in the catalog, active, not OOV
    vocabulary: pa.Array  # item id by embedding row
    row_index: pd.Index  # item id -> embedding row
    affinity: UserAffinity | None  # None: an artifact from before the affinity feature
    # The candidate sources (neighbour scores for the ranker's feature); None: before them.
    sources: Sources | None = None

    @property
    def ranker_reads_affinity(self) -> bool:
        return any(i.name == "user_affinity" for i in self.ranker.get_inputs())

    @property
    def ranker_reads_sources(self) -> bool:
        return any(i.name == "source_features" for i in self.ranker.get_inputs())


def item_catalog(artifact_dir: Path) -> pd.DataFrame:
    """Item features as the features service serves them (profile + stats)."""
    features = artifact_dir / "features"
    profile = pd.read_parquet(features / "item_profile.parquet")
    stats = pd.read_parquet(features / "item_stats.parquet")
    return profile.merge(stats[["item_id", "popularity", "mean_rating"]], on="item_id", how="left")


@lru_cache(maxsize=4)
def load_bundle(artifact_dir: str, ranking_model: str, inactive: tuple[str, ...]) -> ModelBundle:
    directory = Path(artifact_dir)
    manifest = artifacts.verify(directory)
    spec = EncodingSpec.load(directory / "encoding.json")
    encoder = Encoder(spec)
    rows = spec.num_rows
    item_vectors = np.zeros((rows, spec.embedding_dim), dtype=np.float32)
    eligible = np.zeros(rows, dtype=bool)
    table = pd.read_parquet(
        directory / "item_vectors.parquet", columns=["item_id", "vector", "active"]
    )
    index = encoder.item_rows(table["item_id"].tolist())
    item_vectors[index] = np.stack(table["vector"].to_numpy())
    eligible[index] = table["active"].to_numpy(dtype=bool)
    eligible[encoder.item_rows(list(inactive))] = False
    eligible[OOV_ROW] = False
    item_features = np.zeros((rows, spec.item_dim), dtype=np.float32)
    catalog = item_catalog(directory)
    texts = catalog["attributes"] if "attributes" in catalog else [""] * len(catalog)
    for r, attributes in zip(catalog.itertuples(), texts, strict=True):
        item_features[encoder.row_of.get(r.item_id, OOV_ROW)] = encoder.item(
            r.year, r.popularity, r.mean_rating, r.genres, texts_from_json(attributes)
        )
    item_features[OOV_ROW] = 0.0
    vocabulary = ["", *spec.item_ids]
    return ModelBundle(
        version=str(manifest["version"]),
        encoder=encoder,
        user_tower=_session(directory / "user_tower" / "model.onnx"),
        ranker=_session(directory / ranking_model / "model.onnx"),
        item_vectors=item_vectors,
        item_features=item_features,
        eligible=eligible,
        vocabulary=pa.array(vocabulary, pa.string()),
        row_index=pd.Index(vocabulary),
        affinity=UserAffinity.load(directory),
        sources=Sources.load(directory),
    )


@dataclass
class ScoredBatch:
    user_ids: pa.Array
    rows: np.ndarray  # [n, C] candidate embedding rows, retrieval order
    valid: np.ndarray  # [n, C] False where a user had fewer than C candidates
    retrieval: np.ndarray  # [n, C]
    scores: np.ndarray  # [n, C] ranker scores (NaN where not valid)
    user_vectors: np.ndarray  # [n, dim]

    @property
    def pairs(self) -> int:
        return int(self.valid.sum())


def _user_inputs(bundle: ModelBundle, users: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    encoder = bundle.encoder
    attributes = users["attributes"] if "attributes" in users else [""] * len(users)
    features = np.stack(
        [
            encoder.user(a, g, o, c, m, texts_from_json(t))
            for a, g, o, c, m, t in zip(
                users["age"],
                users["gender"],
                users["occupation"],
                users["rating_count"],
                users["mean_rating"],
                attributes,
                strict=True,
            )
        ]
    )
    history = np.stack([encoder.history(list(h)) for h in users["recent_item_ids"]])
    return features.astype(np.float32), history


def _seen_mask(bundle: ModelBundle, seen: Sequence[Sequence[str]], scores: np.ndarray) -> None:
    lengths = np.fromiter((len(s) for s in seen), dtype=np.int64, count=len(seen))
    if lengths.sum() == 0:
        return
    flat = np.concatenate([np.asarray(s, dtype=object) for s in seen if len(s)])
    rows = bundle.row_index.get_indexer(flat)
    users = np.repeat(np.arange(len(seen)), lengths)
    known = rows > 0
    scores[users[known], rows[known]] = -np.inf


def _source_features(
    bundle: ModelBundle, seen: Sequence[Sequence[str]], rows: np.ndarray, valid: np.ndarray
) -> np.ndarray:
    """[valid pairs, SOURCE_FEATURES]: the nightly lists rank the two-tower's
    candidates, each with its neighbour score from the user's own items."""
    neighbour = np.zeros(rows.shape, dtype=np.float32)
    if bundle.sources is not None:
        for u, items in enumerate(seen):
            own = bundle.row_index.get_indexer(np.asarray(list(items), dtype=object))
            neighbour[u] = bundle.sources.user_scores(own[own > 0]).of(rows[u])
    pairs = neighbour[valid]
    return source_features(pairs, np.full(len(pairs), SOURCE_ANN, np.uint8))


def score_users(bundle: ModelBundle, users: pd.DataFrame, candidates: int) -> ScoredBatch:
    """Top-``candidates`` retrieval (exact, unseen, eligible) and ranker scores."""
    user_features, history = _user_inputs(bundle, users)
    user_vectors = bundle.user_tower.run(
        ["user_vector"], {"user_features": user_features, "history": history}
    )[0]
    user_affinity = vectors_or_zeros(bundle.affinity, history)
    similarity = user_vectors @ bundle.item_vectors.T
    similarity[:, ~bundle.eligible] = -np.inf
    _seen_mask(bundle, users["seen_item_ids"].tolist(), similarity)
    c = min(candidates, similarity.shape[1] - 1)
    top = np.argpartition(-similarity, c - 1, axis=1)[:, :c]
    top_scores = np.take_along_axis(similarity, top, axis=1)
    order = np.argsort(-top_scores, axis=1, kind="stable")
    rows = np.take_along_axis(top, order, axis=1)
    retrieval = np.take_along_axis(top_scores, order, axis=1).astype(np.float32)
    valid = np.isfinite(retrieval)
    rows = np.where(valid, rows, OOV_ROW)
    scores = np.full(rows.shape, np.nan, dtype=np.float32)
    user_of_pair = np.nonzero(valid)[0]
    pair_rows = rows[valid]
    flat_scores = np.empty(len(pair_rows), dtype=np.float32)
    features = _source_features(bundle, users["seen_item_ids"].tolist(), rows, valid)
    inputs = bundle.ranker.get_inputs()
    for start in range(0, len(pair_rows), RANKER_CHUNK):
        part = slice(start, start + RANKER_CHUNK)
        owners = user_of_pair[part]
        feed = {
            "item_id": pair_rows[part, None].astype(np.int64),
            "user_vector": user_vectors[owners],
            "user_features": user_features[owners],
            "item_features": bundle.item_features[pair_rows[part]],
            "retrieval_score": retrieval[valid][part, None],
        }
        if bundle.ranker_reads_affinity:
            feed["user_affinity"] = user_affinity[owners]
        if bundle.ranker_reads_sources:
            feed["source_features"] = features[part]
        flat_scores[part] = bundle.ranker.run(["score"], graph_feed(inputs, feed))[0][:, 0]
    scores[valid] = flat_scores
    return ScoredBatch(
        pa.array(users["user_id"].astype(str), pa.string()),
        rows,
        valid,
        np.where(valid, retrieval, np.nan).astype(np.float32),
        scores,
        user_vectors,
    )


def _offsets(counts: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.array(offsets)


def _lists(values: np.ndarray, counts: np.ndarray, type_: pa.DataType) -> pa.ListArray:
    return pa.ListArray.from_arrays(_offsets(counts), pa.array(values, type_))


def tables(bundle: ModelBundle, batch: ScoredBatch, top_n: int) -> tuple[pa.Table, pa.Table]:
    """(all candidate scores in retrieval order, top-N best first) as Arrow tables."""
    counts = batch.valid.sum(axis=1)
    scores = pa.table(
        {
            "user_id": batch.user_ids,
            "item_ids": _lists_of_ids(bundle, batch.rows[batch.valid], counts),
            "retrieval_scores": _lists(batch.retrieval[batch.valid], counts, pa.float32()),
            "scores": _lists(batch.scores[batch.valid], counts, pa.float32()),
        }
    )
    # NaN sorts last; invalid slots are pushed after every real candidate.
    ranked = np.where(batch.valid, batch.scores, -np.inf)
    order = np.argsort(-ranked, axis=1, kind="stable")
    n = np.minimum(counts, top_n)
    take = np.arange(order.shape[1])[None, :] < n[:, None]
    best_rows = np.take_along_axis(batch.rows, order, axis=1)[take]
    best_scores = np.take_along_axis(batch.scores, order, axis=1)[take]
    top = pa.table(
        {
            "user_id": batch.user_ids,
            "item_ids": _lists_of_ids(bundle, best_rows, n),
            "scores": _lists(best_scores, n, pa.float32()),
        }
    )
    return scores, top


def _lists_of_ids(bundle: ModelBundle, rows: np.ndarray, counts: np.ndarray) -> pa.ListArray:
    return pa.ListArray.from_arrays(_offsets(counts), bundle.vocabulary.take(pa.array(rows)))
