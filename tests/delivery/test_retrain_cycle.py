"""One unattended cycle on the real stack (`recserve-stack retrain`): with
nothing new since the build it builds nothing; a shopper who was never in
the export rates films through Envoy (one of them a product upserted
without a vector, which the export never had), and the cycle snapshots,
builds a candidate through the gate, rolls it out under simulated users
with the outcome guardrail, and the judge promotes it by itself: the new
version is current, the newcomer has a stored vector of it, the product a
learned row trained on its rating, and the report beside the
artifact says what was learned and how the rollout ended. A second cycle
while one runs is refused. A cycle whose candidate users like less (they
click only on the current model's lists) ends rolled back by itself: the
current model stays, the report says why."""

from __future__ import annotations

import json

import grpc
import pandas as pd
import pytest

from bench.simulate import held_out_futures
from recserve.retriever.v1 import retriever_pb2 as rpb
from recserve.retriever.v1 import retriever_pb2_grpc
from recserve_model import artifacts
from recserve_model.encoding import EncodingSpec
from tests.delivery.cycles import GUARDED, newcomer_events, retrain, users_until_it_ends
from tests.e2e.test_events import token
from tests.helpers import data_dir_for_versions, poll_until
from tests.stack import running_stack

pytestmark = [pytest.mark.long, pytest.mark.usefixtures("no_cycle_left")]


@pytest.fixture(scope="module")
def stack(built, tmp_path_factory):
    data_dir = data_dir_for_versions(
        tmp_path_factory.mktemp("cycle") / "data", built.directory.parents[1]
    )
    with running_stack(data_dir) as running:
        yield running


def upserted_without_a_vector(stack, item_id: str) -> None:
    """A product the export never had, upserted through Envoy's admin route."""
    admin = [("authorization", f"Bearer {token(stack, 'admin')}")]
    item = rpb.Item(item_id=item_id, title="A film the export never had", categories=["Drama"],
                    year=2026, active=True,
                    attributes={"year": rpb.AttributeValue(number=2026)})  # fmt: skip
    with grpc.insecure_channel(stack.envoy_address) as channel:
        retriever = retriever_pb2_grpc.RetrieverServiceStub(channel)
        request = rpb.UpsertItemsRequest(items=[item])
        assert retriever.UpsertItems(request, metadata=admin, timeout=30).upserted == 1


def movielens_futures(built) -> dict[str, set[str]]:
    return held_out_futures(built.directory.parents[1] / "raw")


def test_with_nothing_new_the_cycle_builds_nothing(stack):
    before = sorted(p.name for p in artifacts.artifacts_root(stack.data_dir).iterdir())
    done = retrain(stack, *GUARDED)
    output, _ = done.communicate(timeout=300)
    assert done.returncode == 0, output
    assert "retrain: nothing-new" in output and "no new events or catalogue changes" in output
    assert "snapshot" in output and " s, CPU " in output  # the one step it ran, timed
    after = sorted(p.name for p in artifacts.artifacts_root(stack.data_dir).iterdir())
    assert after == before
    assert not any((stack.data_dir / "snapshots").iterdir())  # the snapshot is not kept


def test_a_cycle_learns_a_new_shopper_and_the_guardrail_promotes_it(stack, built):
    stable = artifacts.current(stack.data_dir).name
    items = sorted(pd.read_parquet(built.directory / "item_vectors.parquet")["item_id"])[:24]
    upserted_without_a_vector(stack, "cycle-film")
    newcomer_events(stack, "newcomer", items, earlier=("cycle-film",))
    cycle = retrain(stack, *GUARDED)
    lock = stack.data_dir / "retrain" / "LOCK"
    poll_until(lambda: lock.exists() and lock.read_text().strip(), 120, 0.2, "the cycle's lock")
    second = retrain(stack, *GUARDED)
    refused, _ = second.communicate(timeout=120)
    assert second.returncode == 1 and "a retrain is running" in refused, refused
    # Users keep coming while it builds and rolls out; the judge decides.
    _, report = users_until_it_ends(stack, movielens_futures(built), cycle)
    assert report["outcome"] == "promoted", report
    version = report["version"]
    assert version != stable and artifacts.current(stack.data_dir).name == version
    beside = artifacts.artifacts_root(stack.data_dir) / version / "retrain.json"
    assert json.loads(beside.read_text()) == report
    learned = report["learned"]
    assert learned["new_users"] == 1 and learned["new_items"] == 1, learned
    assert learned["events_used"] >= 25, learned
    assert report["gate"]["ranked"]["ndcg@10"] > 0
    assert set(report["steps"]) == {"compact", "snapshot", "build", "rollout"}, report["steps"]
    # Every event is from today: nothing old enough to fold, nothing removed.
    assert "no base" in report["compacted"], report["compacted"]
    assert report["steps"]["build"]["cpu_s"] > 0  # the build's own process, counted
    actions = [d["action"] for d in report["rollout"]["decisions"]]
    assert actions[0] == "start" and actions[-1] == "promote" and "rollback" not in actions
    vectors = pd.read_parquet(beside.parent / "features" / "user_vectors.parquet")
    newcomer = vectors[vectors["user_id"] == "newcomer"]
    assert len(newcomer) == 1 and newcomer["model_version"].iloc[0] == version
    # The upserted product: a learned row of its own, trained on its rating, listed.
    assert "cycle-film" in EncodingSpec.load(beside.parent / "encoding.json").item_ids
    stats = pd.read_parquet(beside.parent / "features" / "item_stats.parquet")
    assert stats.set_index("item_id").loc["cycle-film", "popularity"] > 0
    listed = pd.read_parquet(beside.parent / "item_vectors.parquet").set_index("item_id")
    assert listed.loc["cycle-film", "active"]


def test_a_cycle_whose_candidate_users_like_less_ends_rolled_back(stack, built):
    stable = artifacts.current(stack.data_dir).name
    items = sorted(pd.read_parquet(built.directory / "item_vectors.parquet")["item_id"])[24:48]
    newcomer_events(stack, "second-newcomer", items)  # new data: the cycle builds a candidate
    cycle = retrain(stack, *GUARDED)
    shown, report = users_until_it_ends(stack, movielens_futures(built), cycle, prefer=stable)
    assert report["outcome"] == "rolled_back", report
    candidate = report["version"]
    assert candidate != stable and artifacts.current(stack.data_dir).name == stable
    assert shown.by_version.get(candidate, [0])[0] > 0  # users saw the candidate's lists
    actions = [d["action"] for d in report["rollout"]["decisions"]]
    assert actions[0] == "start" and actions[-1] == "rollback" and "promote" not in actions
    # The guardrail's rollback (not a latency or error trigger): conversion, with its figures.
    assert "conversion" in report["reason"], report["reason"]
    figures = report["rollout"]["decisions"][-1]["figures"]
    assert figures["candidate_conversion"] < figures["stable_conversion"], figures
    assert report["learned"]["new_users"] >= 1
