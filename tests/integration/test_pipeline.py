"""The pipeline's artifacts: ONNX equals PyTorch, int8 close to fp32,
tampering refused, metrics beat popularity, rebuilds are idempotent."""

import shutil

import numpy as np
import onnxruntime as ort
import pytest
import torch

from pipelines.build import build
from pipelines.export import RANKER_INPUTS
from pipelines.models import Int8Ranker, Ranker, TwoTower
from recserve_model import artifacts
from recserve_model.affinity import RANK as AFFINITY_RANK
from recserve_model.affinity import UserAffinity
from recserve_model.encoding import HISTORY_LEN, EncodingSpec
from recserve_model.sources import SOURCE_FEATURES


def load_models(directory):
    spec = EncodingSpec.load(directory / "encoding.json")
    state = torch.load(directory / "torch_state.pt")
    tower = TwoTower(spec.num_rows, spec.user_dim, spec.item_dim, spec.embedding_dim)
    tower.load_state_dict(state["tower"])
    ranker = Ranker(spec.num_rows, spec.user_dim, spec.item_dim, spec.embedding_dim)
    ranker.load_state_dict(state["ranker"])
    return spec, tower.eval(), ranker.eval()


def ranker_inputs(spec, n=257, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "item_id": rng.integers(0, spec.num_rows, (n, 1)).astype(np.int64),
        "user_vector": rng.standard_normal((n, spec.embedding_dim)).astype(np.float32) / 8,
        "user_features": rng.random((n, spec.user_dim)).astype(np.float32),
        "item_features": rng.random((n, spec.item_dim)).astype(np.float32),
        "retrieval_score": rng.random((n, 1)).astype(np.float32),
        "user_affinity": rng.standard_normal((n, AFFINITY_RANK)).astype(np.float32) / 4,
        "source_features": np.concatenate(
            [rng.random((n, 1)), rng.integers(0, 2, (n, SOURCE_FEATURES - 1))], axis=1
        ).astype(np.float32),
    }


def test_onnx_outputs_equal_pytorch(built):
    spec, tower, ranker = load_models(built.directory)
    feed = ranker_inputs(spec)
    torch_in = [torch.from_numpy(feed[name]) for name in RANKER_INPUTS]
    with torch.no_grad():
        expected = ranker(*torch_in).numpy()
        expected_int8 = Int8Ranker(ranker)(*torch_in).numpy()
    got = ort.InferenceSession(str(built.directory / "ranker" / "model.onnx")).run(None, feed)[0]
    got_int8 = ort.InferenceSession(str(built.directory / "ranker_int8" / "model.onnx")).run(
        None, feed
    )[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_int8, expected_int8, rtol=1e-5, atol=1e-5)

    rng = np.random.default_rng(1)
    user_features = rng.random((33, spec.user_dim)).astype(np.float32)
    history = rng.integers(0, spec.num_rows, (33, HISTORY_LEN)).astype(np.int64)
    history[:, 15:] = 0  # padding
    with torch.no_grad():
        expected_u = tower.user(torch.from_numpy(user_features), torch.from_numpy(history)).numpy()
    got_u = ort.InferenceSession(str(built.directory / "user_tower" / "model.onnx")).run(
        None, {"user_features": user_features, "history": history}
    )[0]
    np.testing.assert_allclose(got_u, expected_u, rtol=1e-5, atol=1e-5)


def test_the_user_side_of_the_affinity_equals_the_trained_graphs(built):
    """What callers compute once per user (recserve_model/affinity.py, from
    the artifact) equals the training graph's per-row computation."""
    _, _, ranker = load_models(built.directory)
    rng = np.random.default_rng(4)
    history = rng.integers(0, ranker.affinity.history_side.shape[0], (40, HISTORY_LEN))
    history[:, 12:] = 0  # padding
    served = UserAffinity.load(built.directory).vectors(history)
    with torch.no_grad():
        trained = ranker.affinity.user_side(torch.from_numpy(history)).numpy()
    np.testing.assert_allclose(served, trained, rtol=1e-5, atol=1e-6)


def test_int8_scores_agree_closely_with_fp32(built):
    spec, _, _ = load_models(built.directory)
    feed = ranker_inputs(spec, n=2000, seed=3)
    fp32 = ort.InferenceSession(str(built.directory / "ranker" / "model.onnx")).run(None, feed)[0]
    int8 = ort.InferenceSession(str(built.directory / "ranker_int8" / "model.onnx")).run(
        None, feed
    )[0]
    assert np.corrcoef(fp32[:, 0], int8[:, 0])[0, 1] > 0.999
    assert np.abs(fp32 - int8).max() < 0.05 * (np.abs(fp32).max() + 1e-6)
    m = built.metrics
    assert (
        abs(m["ranked_int8"]["ndcg@10"] - m["ranked"]["ndcg@10"]) <= 0.01 * m["ranked"]["ndcg@10"]
    )


def test_models_beat_popularity_clearly(built):
    m = built.metrics
    for model in ("two_tower", "ranked", "ranked_int8"):
        assert m[model]["recall@10"] >= 1.3 * m["popularity"]["recall@10"], model
        assert m[model]["ndcg@10"] >= 1.3 * m["popularity"]["ndcg@10"], model


def test_the_served_ranking_beats_the_baselines_and_its_own_candidates(built):
    """The ranked list Recommend serves against popularity, item-kNN
    and EASE on the same split (all in the build's own evaluation), and the
    ranker's gain over the order of the candidates it is given."""
    m = built.metrics
    for model in ("ranked", "ranked_int8"):
        for metric in ("recall@10", "ndcg@10"):
            best_baseline = max(m[b][metric] for b in ("popularity", "item_knn", "ease"))
            assert m[model][metric] >= 1.05 * best_baseline, (model, metric)
        assert m[model]["ndcg@10"] >= 1.05 * m["two_tower"]["ndcg@10"], model


def test_rebuild_with_unchanged_inputs_redoes_nothing(built):
    again = build(built.directory.parents[1])
    assert again.reused
    assert again.version == built.version
    assert again.triton_versions == built.triton_versions


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_tampered_or_truncated_artifact_is_refused_by_name(built, tmp_path, damage):
    copy = tmp_path / built.version
    shutil.copytree(built.directory, copy)
    assert artifacts.verify(copy)["version"] == built.version
    target = copy / "ranker" / "model.onnx.data"
    data = bytearray(target.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        target.write_bytes(bytes(data[: len(data) // 2]))
    else:
        target.unlink()
    with pytest.raises(artifacts.ArtifactError, match=r"ranker/model\.onnx\.data"):
        artifacts.verify(copy)


def test_manifest_records_what_the_issue_asks(built):
    manifest = artifacts.verify(built.directory)
    assert manifest["dataset_fingerprint"] and manifest["training_config"]
    assert manifest["created_at"] and manifest["metrics"] == built.metrics
    for name in (
        "ranker/model.onnx",
        "ranker/model.onnx.data",
        "item_vectors.parquet",
        "popular.json",
        "encoding.json",
    ):
        assert len(manifest["files"][name]) == 64


def test_every_segment_of_new_users_has_its_own_list(built):
    """cold_start.json: one list per (gender, age band, occupation), each
    given or not, of known items, chosen for the attributes (not one popular
    list copied)."""
    import json

    import pandas as pd

    from recserve_model import segments as segment

    document = json.loads((built.directory / segment.FILE).read_text())
    lists = document["lists"]
    users = pd.read_parquet(built.directory / "features" / "user_profile.parquet")
    occupations = set(users["occupation"])
    assert [a["name"] for a in document["attributes"]] == ["gender", "age", "occupation"]
    bands = len(segment.AGE_BANDS) - 1
    assert len(lists) == (len(segment.GENDERS) + 1) * (bands + 1) * (len(occupations) + 1) - 1
    items = set(pd.read_parquet(built.directory / "features" / "item_profile.parquet")["item_id"])
    for ids in lists.values():
        assert len(ids) == len(set(ids)) == 200 and set(ids) <= items
    tops = {tuple(ids[:10]) for ids in lists.values()}
    assert len(tops) > 10  # the attributes change the list
    popular = json.loads((built.directory / "popular.json").read_text())["all"]
    assert [p["item_id"] for p in popular[:10]] not in [list(t) for t in tops]
