"""One unattended cycle on the real stack (`recserve-stack retrain`): with
nothing new since the build it builds nothing; a shopper who was never in
the export rates films through Envoy, and the cycle snapshots, builds a
candidate through the gate, rolls it out under simulated users with the
outcome guardrail, and the judge promotes it by itself: the new version is
current, the newcomer has a stored vector of it, and the report beside the
artifact says what was learned and how the rollout ended. A second cycle
while one runs is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc
import pandas as pd
import pytest

from bench.simulate import held_out_futures, simulate
from recserve.recommend.v1 import events_pb2 as epb
from recserve.recommend.v1 import events_pb2_grpc
from recserve_model import artifacts
from tests.helpers import data_dir_for_versions, poll_until
from tests.stack import running_stack

ROOT = Path(__file__).resolve().parents[2]
GUARDED = ["--guardrail-baseline-rate", "0.5", "--guardrail-min-drop", "0.5",
           "--steps", "50,100", "--soak-s", "1", "--min-requests", "5"]  # fmt: skip


@pytest.fixture(scope="module")
def stack(built, tmp_path_factory):
    data_dir = data_dir_for_versions(
        tmp_path_factory.mktemp("cycle") / "data", built.directory.parents[1]
    )
    with running_stack(data_dir) as running:
        yield running


def retrain(stack, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "recserve_stack", "retrain", *args]
    return subprocess.Popen(
        command, env=stack.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def newcomer_rates(stack, user: str, items: list[str]) -> None:
    token = (stack.data_dir / "auth" / "app.token").read_text().strip()
    batch = [
        epb.AppEvent(event_id=f"{user}-{n}", user_id=user, item_id=item, event_type="rating",
                     value=4.0)
        for n, item in enumerate(items)
    ]  # fmt: skip
    with grpc.insecure_channel(stack.envoy_address) as channel:
        events = events_pb2_grpc.EventServiceStub(channel)
        metadata = [("authorization", f"Bearer {token}")]
        events.PushEvents(epb.PushEventsRequest(events=batch), metadata=metadata, timeout=10)


def test_with_nothing_new_the_cycle_builds_nothing(stack):
    before = sorted(p.name for p in artifacts.artifacts_root(stack.data_dir).iterdir())
    done = retrain(stack, *GUARDED)
    output, _ = done.communicate(timeout=300)
    assert done.returncode == 0, output
    assert "retrain: nothing-new" in output and "no new events or catalogue changes" in output
    after = sorted(p.name for p in artifacts.artifacts_root(stack.data_dir).iterdir())
    assert after == before
    assert not any((stack.data_dir / "snapshots").iterdir())  # the snapshot is not kept


def test_a_cycle_learns_a_new_shopper_and_the_guardrail_promotes_it(stack, built):
    stable = artifacts.current(stack.data_dir).name
    items = sorted(pd.read_parquet(built.directory / "item_vectors.parquet")["item_id"])[:24]
    newcomer_rates(stack, "newcomer", items)
    cycle = retrain(stack, *GUARDED)
    lock = stack.data_dir / "retrain" / "LOCK"
    poll_until(lambda: lock.exists() and lock.read_text().strip(), 120, 0.2, "the cycle's lock")
    second = retrain(stack, *GUARDED)
    refused, _ = second.communicate(timeout=120)
    assert second.returncode == 1 and "a retrain is running" in refused, refused
    # Users keep coming while it builds and rolls out; the judge decides.
    token = (stack.data_dir / "auth" / "app.token").read_text().strip()
    futures = held_out_futures(built.directory.parents[1] / "raw")
    simulate(stack.envoy_address, token, futures, lambda _: cycle.poll() is not None, max_s=900)
    output, _ = cycle.communicate(timeout=300)
    assert cycle.returncode == 0, output
    report = json.loads((stack.data_dir / "retrain" / "last.json").read_text())
    assert report["outcome"] == "promoted", report
    version = report["version"]
    assert version != stable and artifacts.current(stack.data_dir).name == version
    beside = artifacts.artifacts_root(stack.data_dir) / version / "retrain.json"
    assert json.loads(beside.read_text()) == report
    assert report["learned"]["new_users"] == 1 and report["learned"]["events_used"] >= 24
    assert report["gate"]["ranked"]["ndcg@10"] > 0
    actions = [d["action"] for d in report["rollout"]["decisions"]]
    assert actions[0] == "start" and actions[-1] == "promote" and "rollback" not in actions
    vectors = pd.read_parquet(beside.parent / "features" / "user_vectors.parquet")
    newcomer = vectors[vectors["user_id"] == "newcomer"]
    assert len(newcomer) == 1 and newcomer["model_version"].iloc[0] == version
