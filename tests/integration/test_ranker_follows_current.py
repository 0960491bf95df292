"""The ranker serves what CURRENT names, as the retriever, the features
service and the gateways do: outside a rollout it follows CURRENT within
seconds (a build's --promote), also when CURRENT moved while it was down,
and an operator's LoadModel moves CURRENT, so the others follow it. Real
Triton, real ranker processes' domain (in-process servers)."""

import asyncio
import shutil

import grpc
import pytest

from pipelines.triton_repo import model_specs, publish_model
from recserve.ranker.v1 import ranker_pb2 as pb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve_delivery import state as rollout_state
from recserve_model import artifacts
from recserve_stack.triton_process import running_triton
from tests.helpers import (
    apoll_until,
    ranker_candidates,
    ranker_catalog,
    started_ranker,
    user_message,
)

MODELS = ["user_tower", "ranker", "item_tower"]


@pytest.fixture(scope="module")
def setup(built, tmp_path_factory):
    """A data dir whose repository holds the built version and a second
    artifact with files of its own (what a retrain is to the ranker)."""
    root = tmp_path_factory.mktemp("follow")
    repository = root / "triton" / "repository"
    shutil.copytree(built.directory.parents[1] / "triton" / "repository", repository, symlinks=True)
    (root / "artifacts").mkdir()
    (root / "artifacts" / built.version).symlink_to(built.directory)
    own = built.version + "-own"
    shutil.copytree(built.directory, root / "artifacts" / own)
    for model in model_specs():
        if model.name in MODELS:
            publish_model(repository, model, root / "artifacts" / own, own)
    artifacts.set_current(root, built.version)
    return root, repository, own


@pytest.fixture(scope="module")
def triton(setup):
    root, repository, _ = setup
    with running_triton(root / "triton-run", repository, MODELS) as server:
        yield server


async def ranker_on(root, repository, triton):
    return await started_ranker(root, repository, triton, rollout_interval_s=0.1)


async def answered_by(stub, built) -> str:
    users, items = ranker_catalog(built.directory)
    request = pb.ScoreRequest(
        user=user_message(users.iloc[0]), candidates=ranker_candidates(items, 20)
    )
    return (await stub.Score(request, timeout=30)).model_version


async def test_the_ranker_follows_current_and_load_model_moves_it(setup, triton, built):
    root, repository, own = setup
    service = await ranker_on(root, repository, triton)
    try:
        async with grpc.aio.insecure_channel(service.address) as channel:
            stub = ranker_pb2_grpc.RankerServiceStub(channel)
            assert await answered_by(stub, built) == built.version
            # Another replica promoted a rollout of ``own`` (the state file and
            # CURRENT, shared): this ranker follows by itself and keeps that
            # replica's record rather than writing its own over it.
            promoted = rollout_state.RolloutState(
                stable=own, candidate=own, status="promoted", reason="by the other replica"
            )
            rollout_state.save(root, promoted)
            artifacts.set_current(root, own)

            async def on_own():
                return await answered_by(stub, built) == own

            await apoll_until(on_own, 60, interval_s=0.2)
            kept = rollout_state.load(root)
            assert (kept.stable, kept.status, kept.reason) == (own, "promoted", promoted.reason)
            # An operator's switch back moves CURRENT with it.
            loaded = await stub.LoadModel(pb.LoadModelRequest(version=built.version))
            assert loaded.model_version == built.version
            assert artifacts.current_version(root) == built.version
            assert await answered_by(stub, built) == built.version
            # A build's --promote (CURRENT alone moves): followed, and pinned.
            artifacts.set_current(root, own)
            await apoll_until(on_own, 60, interval_s=0.2)
            assert rollout_state.load(root).stable == own
            await stub.LoadModel(pb.LoadModelRequest(version=built.version))
    finally:
        await service.stop(0)

    # CURRENT moved while the ranker was down: it starts on CURRENT's, not
    # on the stable it had persisted.
    assert rollout_state.load(root).stable == built.version
    artifacts.set_current(root, own)
    service = await ranker_on(root, repository, triton)
    try:
        async with grpc.aio.insecure_channel(service.address) as channel:
            stub = ranker_pb2_grpc.RankerServiceStub(channel)
            assert await answered_by(stub, built) == own
        assert rollout_state.load(root).stable == own
    finally:
        await service.stop(0)


async def test_a_copy_of_current_stays_the_stable(setup, triton, built):
    """A rehearsal copy (a link to CURRENT's files) pinned as the stable is
    CURRENT's model under another name: nothing to follow."""
    root, repository, own = setup
    copy = own + "-copy"
    (root / "artifacts" / copy).symlink_to(root / "artifacts" / own)
    for model in model_specs():
        if model.name in MODELS:
            publish_model(repository, model, root / "artifacts" / own, copy)
    artifacts.set_current(root, own)
    service = await ranker_on(root, repository, triton)
    try:
        async with grpc.aio.insecure_channel(service.address) as channel:
            stub = ranker_pb2_grpc.RankerServiceStub(channel)
            await stub.LoadModel(pb.LoadModelRequest(version=copy))
            assert artifacts.current_version(root) == own  # a copy leaves CURRENT
            for _ in range(10):  # ten judge intervals: it stays on the copy
                await asyncio.sleep(0.1)
                assert await answered_by(stub, built) == copy
    finally:
        await service.stop(0)
