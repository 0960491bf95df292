"""The retriever's candidate sources over real Qdrant Edge: a Search that
sends the user's history gets the artifact's item-to-item and popular picks
beside the nearest neighbours, each with its source bits and neighbour
score, never one of the user's own items; with the sources turned off
(RECSERVE_RETRIEVER_CANDIDATE_SOURCES=false) the same Search is the nearest
neighbours alone."""

import numpy as np
import pandas as pd
import pytest

from recserve.retriever.v1 import retriever_pb2 as pb
from recserve_model.sources import SOURCE_ANN, SOURCE_NEIGHBOURS, SOURCE_POPULAR, Sources
from tests.integration.test_retriever import serving_retriever


@pytest.fixture(scope="module")
def user(built):
    """A user's stored vector and their items, most recent first."""
    vectors = pd.read_parquet(built.directory / "features" / "user_vectors.parquet")
    raw = built.directory.parents[1] / "raw" / "movielens-100k" / "interactions.parquet"
    events = pd.read_parquet(raw)
    row = vectors.iloc[0]
    mine = events[events["user_id"].astype(str) == str(row["user_id"])]
    history = mine.sort_values("timestamp", ascending=False)["item_id"].astype(str).tolist()
    return np.asarray(row["vector"], np.float32), history


def search(vector, history, k=50):
    return pb.SearchRequest(
        vector_f32=vector.astype("<f4").tobytes(), k=k, columns=True, history_item_ids=history
    )


@pytest.mark.parametrize("on", [True, False])
async def test_a_search_with_history_adds_the_sources_unless_turned_off(built, tmp_path, user, on):
    vector, history = user
    assert Sources.load(built.directory) is not None  # the build wrote its sources
    async with serving_retriever(built, tmp_path, "edge", candidate_sources=on) as (stub, _):
        reply = await stub.Search(search(vector, history))
        # The message form: the nearest neighbours alone, as before the sources.
        nearest = await stub.Search(
            pb.SearchRequest(vector=vector, k=50, filter=pb.SearchFilter(exclude_item_ids=history))
        )
    ids, ann = list(reply.item_ids), [hit.item_id for hit in nearest.items]
    assert not set(ids) & set(history)  # never the user's own items
    assert ids[:50] == ann  # the nearest neighbours first, as they were
    if not on:
        assert ids == ann and reply.sources == b""
        return
    bits = np.frombuffer(reply.sources, np.uint8)
    neighbour = np.frombuffer(reply.neighbour_scores_f32, "<f4")
    assert len(bits) == len(ids) == len(neighbour) > 50
    assert (bits[:50] & SOURCE_ANN).all() and not (bits[50:] & SOURCE_ANN).any()
    assert (bits & SOURCE_NEIGHBOURS).any() and (bits & SOURCE_POPULAR).any()
    # An item-to-item pick has a neighbour score from the user's items.
    assert (neighbour[(bits & SOURCE_NEIGHBOURS) > 0] != 0).all()
