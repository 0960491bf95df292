"""When the ranker writes CURRENT (services/ranker/versions.py), Triton left
out: a version is loaded as its name (``_prepare`` replaced) and the
repository's version numbers are given. With real Triton and ranker
processes: tests/integration/test_ranker_follows_current.py, tests/delivery."""

import asyncio
from types import SimpleNamespace

from recserve_delivery import state as rollout_state
from recserve_model import artifacts
from services.ranker import versions as versions_module
from services.ranker.config import RankerSettings
from services.ranker.versions import ModelVersions
from tests.unit.test_rollout import plan


def ranker_on(data_dir, monkeypatch) -> ModelVersions:
    """A ranker's versions over artifacts v1 and v2, v1 CURRENT."""
    for version in ("v1", "v2"):
        (artifacts.artifacts_root(data_dir) / version).mkdir(parents=True, exist_ok=True)
    artifacts.set_current(data_dir, "v1")
    monkeypatch.setattr(versions_module, "read_versions", lambda *_: {"v1": 1, "v2": 2})
    ranker = ModelVersions(RankerSettings(data_dir=data_dir), triton=None)  # type: ignore[arg-type]

    async def prepare(version):
        return ranker.versions.setdefault(version, SimpleNamespace(version=version))

    monkeypatch.setattr(ranker, "_prepare", prepare)
    return ranker


def test_a_promoted_candidate_is_current_before_the_state_says_promoted(tmp_path, monkeypatch):
    """Else a follower that reads "promoted" beside the old CURRENT follows
    CURRENT back to the old version (as a CI run once ended a promotion)."""
    ranker = ranker_on(tmp_path, monkeypatch)
    asyncio.run(ranker._initial_load())
    asyncio.run(ranker.start_rollout(plan(candidate="v2", steps_percent=[50.0, 100.0])))
    saved = []
    save = rollout_state.save

    def save_and_look(data_dir, state, name="ranker"):
        saved.append((state.status, artifacts.current_version(data_dir)))
        save(data_dir, state, name)

    monkeypatch.setattr(rollout_state, "save", save_and_look)
    ranker.rollout_action("promote")  # to 100%: nothing is current yet
    ranker.rollout_action("promote")  # past the last step
    assert saved == [("running", "v1"), ("promoted", "v2")]
    assert ranker.current().version == "v2"
    ranker.replica.lock.release()


def test_following_current_never_writes_it_back_over_a_newer_one(tmp_path, monkeypatch):
    ranker = ranker_on(tmp_path, monkeypatch)
    asyncio.run(ranker._initial_load())
    artifacts.set_current(tmp_path, "v2")  # a build's --promote
    prepare = ranker._prepare

    async def prepare_while_current_moves(version):
        # An operator's LoadModel on another replica, while this one loads v2.
        artifacts.set_current(tmp_path, "v1")
        return await prepare(version)

    monkeypatch.setattr(ranker, "_prepare", prepare_while_current_moves)
    asyncio.run(ranker.follow_current())
    assert ranker.current().version == "v2"  # what it set out to follow
    assert artifacts.current_version(tmp_path) == "v1"  # the newer choice stands
    monkeypatch.setattr(ranker, "_prepare", prepare)
    asyncio.run(ranker.follow_current())
    assert ranker.current().version == "v1"
    ranker.replica.lock.release()
