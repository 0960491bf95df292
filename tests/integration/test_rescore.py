"""Nightly re-scoring on real Spark (local mode): batch scores equal the
online ranker's (real Triton), the gates fail bad runs by name and pass good
ones, publish is atomic, rollback restores the previous lists, and a killed
job resumes without redoing finished buckets."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import numpy as np
import pandas as pd
import psutil
import pyarrow.parquet as pq
import pytest
import torch

from pipelines import export
from pipelines.models import Ranker
from pipelines.rescore import layout, spark
from pipelines.rescore.job import RunConfig, completed_buckets, run_job
from pipelines.rescore.publish import (
    PublishError,
    feature_store,
    live,
    publish,
    read_recommendations,
    rollback,
)
from pipelines.rescore.synthetic import write_users
from pipelines.rescore.validate import validate
from pipelines.rescore.with_events import features_with_events
from recserve.features.v1 import features_pb2 as fpb
from recserve.features.v1 import features_pb2_grpc
from recserve_model import artifacts
from recserve_model.encoding import EncodingSpec
from recserve_model.sources import Sources
from services.features.config import FeaturesSettings
from services.features.server import create_server as features_server
from services.gateway.popular import PopularItems
from tests.helpers import data_dir_with_artifacts, poll_until, user_message

pytestmark = pytest.mark.long  # minutes: started first in parallel runs
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def session():
    spark_session = spark.session("local[2]")
    yield spark_session
    spark_session.stop()


@pytest.fixture(scope="module")
def data_dir(built, tmp_path_factory):
    root = data_dir_with_artifacts(tmp_path_factory.mktemp("rescore"), built.directory.parents[1])
    (root / "raw").symlink_to(built.directory.parents[1] / "raw", target_is_directory=True)
    return root


def config_for(built, run_id, **overrides):
    values = dict(
        run_id=run_id,
        artifact_dir=str(built.directory),
        artifact_version=built.version,
        features_dir=str(built.directory / "features"),
        buckets=4,
    )
    values.update(overrides)
    return RunConfig(**values)


def top_n_lists(run_dir):
    frame = pd.concat(pd.read_parquet(p) for p in sorted(run_dir.glob("top_n/bucket=*/*.parquet")))
    return {u: list(items) for u, items in zip(frame["user_id"], frame["item_ids"], strict=True)}


@pytest.fixture(scope="module")
def inactive(built):
    stats = pd.read_parquet(built.directory / "features" / "item_stats.parquet")
    return sorted(stats.nlargest(5, "popularity")["item_id"])  # items everyone would get


@pytest.fixture(scope="module")
def good_run(built, session, data_dir, inactive):
    """A run scored, validated and published: the baseline for the others."""
    run_dir = layout.staging(data_dir, "good")
    result = run_job(session, config_for(built, "good", inactive_items=inactive), run_dir)
    report = validate(data_dir, run_dir)
    assert report.passed, report.failed
    # The nightly lists are held against EASE as well as popularity.
    names = {g.name for g in report.gates}
    assert {"beats_ease_ndcg@10", "beats_ease_recall@100", "beats_popularity_ndcg@10"} <= names
    assert report.metrics["ndcg@10"] > report.metrics["ease_ndcg@10"] > 0
    lists = top_n_lists(run_dir)
    publish(data_dir, "good")
    return result, report, lists


def test_every_user_gets_n_sorted_unseen_active_items(built, good_run, data_dir, inactive):
    result, report, lists = good_run
    users = pd.read_parquet(built.directory / "features" / "user_activity.parquet")
    assert result.users == len(users) == len(lists)
    assert result.pairs == result.users * 200
    seen = dict(zip(users["user_id"], users["seen_item_ids"], strict=True))
    run_dir = layout.published_run(data_dir, "good")
    for path in run_dir.glob("top_n/bucket=*/*.parquet"):
        for user, items, scores in pq.read_table(path).to_pandas().itertuples(index=False):
            assert len(items) == 100 and len(set(items)) == 100
            assert list(scores) == sorted(scores, reverse=True)
            assert not set(items) & set(seen[user]) and not set(items) & set(inactive)
    # Better than popularity on the holdout, as the offline evaluation found.
    assert report.metrics["recall@100"] > report.metrics["popularity_recall@100"]
    assert (run_dir / "scores.png").stat().st_size > 0


@pytest.fixture(scope="module")
def triton(built, tmp_path_factory):
    from recserve_stack.triton_process import running_triton

    repository = built.directory.parents[1] / "triton" / "repository"
    with running_triton(
        tmp_path_factory.mktemp("triton"), repository, ["user_tower", "ranker"]
    ) as server:
        yield server


async def test_batch_scores_equal_the_online_rankers(built, good_run, data_dir, triton):
    from recserve.ranker.v1 import ranker_pb2 as pb
    from recserve.ranker.v1 import ranker_pb2_grpc
    from services.ranker.config import RankerSettings
    from services.ranker.server import create_server
    from tests.helpers import apoll_until

    features = built.directory / "features"
    users = pd.read_parquet(features / "user_profile.parquet").merge(
        pd.read_parquet(features / "user_activity.parquet"), on="user_id"
    )
    items = (
        pd.read_parquet(features / "item_profile.parquet")
        .merge(pd.read_parquet(features / "item_stats.parquet"), on="item_id")
        .set_index("item_id")
    )
    scored = pd.concat(
        pd.read_parquet(p)
        for p in layout.published_run(data_dir, "good").glob("scores/bucket=*/*.parquet")
    ).set_index("user_id")
    repository = built.directory.parents[1] / "triton" / "repository"
    sources = Sources.load(built.directory)
    assert sources is not None
    settings = RankerSettings(
        port=0,
        data_dir=built.directory.parents[1],
        triton_url=triton.grpc_url,
        triton_repository=repository,
        shutdown_drain_s=0,
    )
    service = await create_server(settings)
    await service.start()
    await apoll_until(lambda: service.domain.models_ready(), 60)
    async with grpc.aio.insecure_channel(service.address) as channel:
        stub = ranker_pb2_grpc.RankerServiceStub(channel)
        await stub.LoadModel(pb.LoadModelRequest(version=built.version))
        for user in users.sample(5, random_state=1).itertuples():
            row = scored.loc[user.user_id]
            candidates = [
                pb.Candidate(
                    item_id=i,
                    retrieval_score=float(s),
                    features=fpb.ItemFeatures(
                        item_id=i,
                        found=True,
                        year=int(items.at[i, "year"]),
                        categories=list(items.at[i, "genres"]),
                        popularity=int(items.at[i, "popularity"]),
                        mean_rating=float(items.at[i, "mean_rating"]),
                    ),
                )
                for i, s in zip(row["item_ids"], row["retrieval_scores"], strict=True)
            ]
            # The nightly job's neighbour feature, as the retriever would send it.
            own = sources.user_scores(sources.rows(list(user.seen_item_ids)))
            neighbour = own.of(np.array([sources.row_of[i] for i in row["item_ids"]]))
            request = pb.ScoreRequest(
                user=user_message(user),
                candidates=candidates,  # no user_vector: Triton's user tower computes it
                neighbour_scores_f32=neighbour.astype("<f4").tobytes(),
            )
            reply = await stub.Score(request)
            assert reply.model_version == built.version
            np.testing.assert_allclose(reply.scores, row["scores"], rtol=1e-4, atol=1e-4)
    await service.stop(0)


@asynccontextmanager
async def features_service(data_dir):
    """The real features service over ``data_dir``, in process; yields a stub."""
    settings = FeaturesSettings(port=0, data_dir=data_dir, shutdown_drain_s=0, refresh_interval_s=0)
    service = await features_server(settings)
    await service.start()
    try:
        async with grpc.aio.insecure_channel(service.address) as channel:
            yield features_pb2_grpc.FeatureServiceStub(channel)
    finally:
        await service.stop(0)


def staged_copy(data_dir, source_run, run_id, edit):
    """A staged run whose outputs ``edit`` has changed: data that should fail a gate."""
    target = layout.staging(data_dir, run_id)
    shutil.copytree(layout.published_run(data_dir, source_run), target)
    config = RunConfig.load(target / "run.json")
    RunConfig(**{**config.__dict__, "run_id": run_id}).save(target / "run.json")
    for dataset in ("scores", "top_n"):
        for path in target.glob(f"{dataset}/bucket=*/*.parquet"):
            frame = pd.read_parquet(path)
            edit(dataset, frame)
            frame.to_parquet(path, index=False)
    return target


def shift(dataset, frame):
    frame["scores"] = [np.asarray(s) + 3.0 for s in frame["scores"]]


def nans(dataset, frame):
    if dataset == "scores":
        frame.at[0, "scores"] = np.full(len(frame.at[0, "scores"]), np.nan, dtype=np.float32)


def duplicate_and_seen(built):
    activity = pd.read_parquet(built.directory / "features" / "user_activity.parquet")
    seen = dict(zip(activity["user_id"], activity["seen_item_ids"], strict=True))

    def edit(dataset, frame):
        if dataset == "top_n":
            items = list(frame.at[0, "item_ids"])
            frame.at[0, "item_ids"] = [items[0], items[0], *items[2:]]
            items = list(frame.at[1, "item_ids"])
            frame.at[1, "item_ids"] = [seen[frame.at[1, "user_id"]][0], *items[1:]]

    return edit


@pytest.mark.parametrize(
    "run_id,edit,expected",
    [
        ("shifted", shift, {"mean_shift_sd", "ks_statistic"}),
        ("nans", nans, {"nan_rate"}),
        ("broken-lists", "duplicates", {"duplicates", "seen_items"}),
    ],
)
def test_a_failed_gate_stops_the_publish_naming_it(
    built, good_run, data_dir, run_id, edit, expected
):
    edit = duplicate_and_seen(built) if edit == "duplicates" else edit
    staged_copy(data_dir, "good", run_id, edit)
    before = layout.read_json(layout.pointer(data_dir))
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines",
            "rescore",
            "validate",
            run_id,
            "--data-dir",
            str(data_dir),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert cli.returncode == 1
    failed = set(layout.read_json(layout.staging(data_dir, run_id) / "report.json")["failed"])
    assert expected <= failed, failed
    assert all(name in cli.stdout + cli.stderr for name in expected)
    with pytest.raises(PublishError, match=sorted(expected)[0]):
        publish(data_dir, run_id)
    assert layout.read_json(layout.pointer(data_dir)) == before


def worse_artifact(built, tmp_path):
    """The same artifact with a ranker that orders candidates backwards."""
    copy = tmp_path / (built.version + "-worse")
    shutil.copytree(built.directory, copy)
    spec = EncodingSpec.load(copy / "encoding.json")
    ranker = Ranker(spec.num_rows, spec.user_dim, spec.item_dim, spec.embedding_dim)
    ranker.load_state_dict(torch.load(copy / "torch_state.pt")["ranker"])
    with torch.no_grad():
        ranker.retrieval_weight.neg_()
        ranker.affinity_weight.neg_()
    shutil.rmtree(copy / "ranker")
    export.export_ranker(ranker, spec, copy / "ranker" / "model.onnx")
    artifacts.write_manifest(copy, copy.name, {"metrics": {}})
    return copy


def test_the_nightly_with_events_leaves_out_what_users_rated_since_the_build(
    built, good_run, session, data_dir, inactive, tmp_path
):
    """A rating logged through the events API after the build: with the
    events folded in, that user's list no longer holds the item; the other
    users' lists are the same as the run without events."""
    _, _, lists = good_run
    user = sorted(lists)[0]
    rated = lists[user][0]  # the good run's first item for that user
    log = data_dir / "events" / "app" / "2026-12-01" / "00-gateway.jsonl"
    log.parent.mkdir(parents=True)
    event = {"event_id": "nightly-1", "user_id": user, "item_id": rated, "event_type": "rating",
             "value": 5.0, "timestamp": 1_900_000_000, "recommendation_id": "",
             "received_at": 1_900_000_000.0}  # fmt: skip
    log.write_text(json.dumps(event) + "\n")
    try:
        logged = features_with_events(data_dir, built.directory, tmp_path / "features")
        assert len(logged.rows) == 1 and logged.skipped == 0
        run_dir = layout.staging(data_dir, "with-events")
        config = config_for(
            built, "with-events", features_dir=str(tmp_path / "features"), inactive_items=inactive
        )
        run_job(session, config, run_dir)
    finally:
        shutil.rmtree(data_dir / "events")
    after = top_n_lists(run_dir)
    assert rated not in after[user] and len(after[user]) == 100
    others = [u for u in lists if u != user]
    assert all(after[u] == lists[u] for u in others)


def test_a_worse_model_fails_the_quality_gate(built, good_run, session, data_dir, tmp_path):
    worse = worse_artifact(built, tmp_path)
    run_dir = layout.staging(data_dir, "worse")
    config = config_for(built, "worse", artifact_dir=str(worse), artifact_version=worse.name)
    run_job(session, config, run_dir)
    report = validate(data_dir, run_dir)
    assert "vs_published_recall@100" in report.failed and "vs_published_ndcg@10" in report.failed
    assert "beats_ease_ndcg@10" in report.failed
    with pytest.raises(PublishError, match="vs_published"):
        publish(data_dir, "worse")


def test_publish_is_atomic_and_rollback_restores_the_previous_lists(
    built, good_run, session, data_dir
):
    _, _, good_lists = good_run
    run_dir = layout.staging(data_dir, "next")
    # Another night: a few more items were retired, so the lists differ.
    stats = pd.read_parquet(built.directory / "features" / "item_stats.parquet")
    retired = sorted(stats.nlargest(7, "popularity")["item_id"])
    run_job(session, config_for(built, "next", inactive_items=retired), run_dir)
    report = validate(data_dir, run_dir)
    assert report.passed, report.failed
    next_lists = top_n_lists(run_dir)
    expected = {"good": good_lists, "next": next_lists}
    users = sorted(good_lists)[:40]
    assert any(good_lists[u] != next_lists[u] for u in users)
    store = feature_store(data_dir)
    seen_runs, mixed = set(), []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            run, lists = read_recommendations(data_dir, store, users)
            seen_runs.add(run)
            mixed.extend(u for u in users if lists[u][0] != expected[run][u])

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        publish(data_dir, "next")
        poll_until(lambda: "next" in seen_runs, 30, what="readers to see the new run")
    finally:
        stop.set()
        thread.join()
    assert not mixed and seen_runs <= {"good", "next"}
    assert live(data_dir)["run_id"] == "next"
    popular = PopularItems(data_dir)
    popular.reload()
    assert popular.version == "rescore:next"

    state = rollback(data_dir)
    assert state["run_id"] == "good"
    run, lists = read_recommendations(data_dir, feature_store(data_dir), users)
    assert run == "good" and all(lists[u][0] == good_lists[u] for u in users)
    assert popular.reload() and popular.version == "rescore:good"


async def test_the_features_service_serves_the_live_runs_lists(built, good_run, data_dir):
    """What the gateway reads as a user's precomputed list and own fallback."""

    state = live(data_dir)
    lists = top_n_lists(layout.published_run(data_dir, state["run_id"]))
    async with features_service(data_dir) as stub:
        for user_id in ("1", "42", "943"):
            reply = await stub.GetUserFeatures(fpb.GetUserFeaturesRequest(user_id=user_id))
            assert reply.user.precomputed_run_id == state["run_id"]
            assert list(reply.user.precomputed_item_ids) == lists[user_id]
        unknown = await stub.GetUserFeatures(fpb.GetUserFeaturesRequest(user_id="nobody"))
        assert not unknown.user.precomputed_item_ids and not unknown.user.precomputed_run_id


async def test_a_pointer_to_a_missing_slot_never_breaks_user_features(built, tmp_path):
    data_dir = data_dir_with_artifacts(tmp_path / "data", built.directory.parents[1])
    layout.write_json(layout.pointer(data_dir), {"run_id": "ghost", "slot": "z", "history": []})
    async with features_service(data_dir) as stub:
        reply = await stub.GetUserFeatures(fpb.GetUserFeaturesRequest(user_id="42"))
    assert reply.user.found and reply.user.recent_item_ids
    assert not reply.user.precomputed_item_ids


def test_a_relative_data_dir_names_the_same_online_store(data_dir, monkeypatch):
    monkeypatch.chdir(data_dir.parent)
    store = feature_store(Path(data_dir.name))
    assert Path(store.config.online_store.path) == data_dir.resolve() / "feast" / "online.db"


def kill_session(job: subprocess.Popen) -> None:
    """SIGKILL every process of the job's session and wait for all of them.

    Not killpg: pyspark's daemon moves itself and its workers into a group of
    their own (``os.setpgid(0, 0)``), so a worker could finish a bucket after the
    job's group is dead and the test has counted."""
    members = [p for p in psutil.process_iter() if _session_of(p) == job.pid]
    for process in members:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)
    job.wait()
    psutil.wait_procs(members, timeout=60)


def _session_of(process: psutil.Process) -> int | None:
    try:
        return os.getsid(process.pid)
    except (ProcessLookupError, PermissionError):
        return None


# 24 buckets of about 170 users: each takes a few tenths of a second, so
# the job is still running when its third bucket lands (polled every 50 ms).
USERS = 4_000


def test_a_killed_job_resumes_without_redoing_finished_buckets(built, data_dir, tmp_path):
    users_dir = write_users(built.directory, tmp_path / "users", USERS)
    run_id = "killed"
    command = [
        sys.executable, "-m", "pipelines", "rescore", "run", "--data-dir", str(data_dir),
        "--run-id", run_id, "--features-dir", str(users_dir), "--buckets", "24", "--no-publish",
    ]  # fmt: skip
    job = subprocess.Popen(
        command,
        start_new_session=True,  # its own group: the Spark JVM and workers die with it
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    run_dir = layout.staging(data_dir, run_id)
    try:
        poll_until(lambda: len(completed_buckets(run_dir)) >= 3, 180, what="three buckets")
    finally:
        kill_session(job)
    finished = completed_buckets(run_dir)
    assert 0 < len(finished) < 24, "the job must be killed midway"
    stamps = {b: layout.bucket_file(run_dir, "top_n", b).stat().st_mtime_ns for b in finished}
    session = spark.session("local[2]")
    result = run_job(session, RunConfig.load(run_dir / "run.json"), run_dir)
    assert result.buckets_skipped == len(finished)
    assert result.buckets_run == 24 - len(finished)
    for bucket, stamp in stamps.items():  # finished buckets were not rewritten
        assert layout.bucket_file(run_dir, "top_n", bucket).stat().st_mtime_ns == stamp
    lists = top_n_lists(run_dir)
    assert len(lists) == USERS  # every user exactly once
