"""`recserve-stack backup` of a running stack under load, its data dir
deleted, `recserve-stack restore`, the stack started again: the same model
version, the same lists for the same users, every event acknowledged before
the backup began kept exactly once, a newcomer's live features and the app
token still good. A restore into the data dir of a running stack is refused.

The load: newcomers rate films that every compared user has already seen
(so those users' lists, which never hold what they have seen, are not
changed by it), and Recommend for the compared users, while the backup runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pandas as pd
import pytest

from recserve.recommend.v1 import events_pb2 as epb
from recserve.recommend.v1 import events_pb2_grpc, recommend_pb2, recommend_pb2_grpc
from recserve_kit.jsonl_log import read_records
from tests.e2e.test_events import token
from tests.helpers import data_dir_for_versions, full_answer, poll_until
from tests.stack import running_stack

ROOT = Path(__file__).resolve().parents[2]
COMPARED = 5  # users whose lists are compared


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recserve_stack", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def compared_users_and_their_seen_films(artifact: Path) -> tuple[list[str], list[str]]:
    """The users with the longest histories and films all of them have seen."""
    activity = pd.read_parquet(artifact / "features" / "user_activity.parquet")
    longest = activity.sort_values("rating_count", ascending=False).head(COMPARED)
    seen = [set(items) for items in longest["seen_item_ids"]]
    common = sorted(set.intersection(*seen))
    assert len(common) >= 3
    return list(longest["user_id"]), common[:5]


def lists(stub, users: list[str]) -> dict[str, tuple[str, list[str]]]:
    answers = {user: full_answer(stub, user, k=20) for user in users}
    return {user: (a.model_version, [i.item_id for i in a.items]) for user, a in answers.items()}


class Load:
    """Newcomers' ratings through Envoy with the app token (each batch's
    ids and when its answer came) and Recommend calls, from two threads."""

    def __init__(self, stack, films: list[str], users: list[str]) -> None:
        self.address = stack.envoy_address
        self.metadata = [("authorization", f"Bearer {token(stack, 'app')}")]
        self.films = films
        self.users = users
        self.acknowledged: list[tuple[float, list[str]]] = []
        self.failures: list[str] = []
        self.recommended = 0
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self.events, daemon=True),
            threading.Thread(target=self.recommend, daemon=True),
        ]

    def events(self) -> None:
        with grpc.insecure_channel(self.address) as channel:
            stub = events_pb2_grpc.EventServiceStub(channel)
            n = 0
            while not self.stop.is_set():
                user = f"backup-newcomer-{n // 10}"
                batch = [
                    epb.AppEvent(
                        event_id=f"backup-{n}-{film}",
                        user_id=user,
                        item_id=film,
                        event_type="rating",
                        value=4.0,
                    )
                    for film in self.films
                ]
                try:
                    request = epb.PushEventsRequest(events=batch)
                    stub.PushEvents(request, metadata=self.metadata, timeout=10)
                    self.acknowledged.append((time.time(), [e.event_id for e in batch]))
                except grpc.RpcError as failed:
                    self.failures.append(f"PushEvents: {failed.code()}")
                n += 1
                self.stop.wait(0.05)  # the load's pace; ends at once when stopped

    def recommend(self) -> None:
        with grpc.insecure_channel(self.address) as channel:
            stub = recommend_pb2_grpc.RecommendServiceStub(channel)
            n = 0
            while not self.stop.is_set():
                request = recommend_pb2.RecommendRequest(user_id=self.users[n % len(self.users)])
                request.k = 20
                try:
                    stub.Recommend(request, timeout=5)
                    self.recommended += 1
                except grpc.RpcError as failed:
                    self.failures.append(f"Recommend: {failed.code()}")
                n += 1
                self.stop.wait(0.05)  # the load's pace; ends at once when stopped

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)

    def before(self, at: float) -> list[str]:
        return [i for answered, ids in self.acknowledged if answered < at for i in ids]


@pytest.mark.local_stack_only
def test_a_backup_under_load_restores_the_same_lists_and_every_acknowledged_event(
    built, tmp_path_factory
):
    root = tmp_path_factory.mktemp("backup")
    data_dir = data_dir_for_versions(root / "data", built.directory.parents[1])
    users, films = compared_users_and_their_seen_films(built.directory)
    out = root / "backup"
    with running_stack(data_dir) as stack:
        channel = grpc.insecure_channel(stack.envoy_address)
        stub = recommend_pb2_grpc.RecommendServiceStub(channel)
        before = lists(stub, users)
        app_token = token(stack, "app")
        with Load(stack, films, users) as load:
            poll_until(lambda: len(load.acknowledged) >= 60 and load.recommended > 20,
                       60, 0.05, "events and lists under load")  # fmt: skip
            began = time.time()
            backed_up = cli(stack.env, "backup", "--out", str(out))
            took_s = time.time() - began
            after = len(load.acknowledged)
            poll_until(lambda: len(load.acknowledged) >= after + 20, 60, 0.05, "load after it")
        assert backed_up.returncode == 0, backed_up.stderr
        assert not load.failures, load.failures[:5]
        assert load.recommended > 20
        acknowledged = load.before(began)
        assert len(acknowledged) > 50
        # The load did not change the compared users' lists (what the test relies on).
        assert lists(stub, users) == before
        refused = cli({**stack.env}, "restore", "--from", str(out))
        assert refused.returncode == 1 and "a stack is running" in refused.stderr
        channel.close()
        env = stack.env

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stack_running"] and manifest["current"] == built.version
    assert manifest["events"]["app"]["events"] >= len(acknowledged)
    assert manifest["qdrant"]["collections"]
    print(f"backup: {took_s:.1f} s, {manifest['bytes'] / 1e6:.1f} MB; {backed_up.stderr}")

    shutil.rmtree(data_dir)
    restored = cli(env, "restore", "--from", str(out))
    assert restored.returncode == 0, restored.stderr

    with running_stack(data_dir) as stack:
        channel = grpc.insecure_channel(stack.envoy_address)
        stub = recommend_pb2_grpc.RecommendServiceStub(channel)
        assert lists(stub, users) == before
        kept = [r["event_id"] for r in read_records(data_dir / "events" / "app")]
        missing = set(acknowledged) - set(kept)
        assert not missing, sorted(missing)[:5]
        assert len(kept) == len(set(kept))  # exactly once
        # The first newcomer's ratings are in the restored online features.
        newcomer = full_answer(stub, "backup-newcomer-0", k=10)
        assert newcomer.degraded_reason != recommend_pb2.DEGRADED_REASON_COLD_START
        # The app token still holds, and a retried batch is still a duplicate.
        events = events_pb2_grpc.EventServiceStub(channel)
        first = epb.AppEvent(
            event_id=acknowledged[0],
            user_id="backup-newcomer-0",
            item_id=films[0],
            event_type="rating",
            value=4.0,
        )
        metadata = [("authorization", f"Bearer {app_token}")]
        events.PushEvents(epb.PushEventsRequest(events=[first]), metadata=metadata, timeout=10)
        kept = [r["event_id"] for r in read_records(data_dir / "events" / "app")]
        assert kept.count(acknowledged[0]) == 1
        channel.close()
