"""One meaning of a build: it changes what users get (CURRENT) only on a
first install or with --promote, never while a rollout runs; otherwise it
is a candidate. The whole build runs in tests/integration and tests/e2e;
here the decision, and the CLI's refusal before any training."""

import pytest
from typer.testing import CliRunner

from pipelines.__main__ import app
from pipelines.current import PromoteRefused, becomes_current
from pipelines.shop import ShopSize, write_shop
from recserve_delivery import state as rollout_state
from recserve_model import artifacts


@pytest.fixture
def data_dir(tmp_path):
    (tmp_path / "artifacts").mkdir()
    return tmp_path


def test_a_first_install_serves_unless_asked_for_a_candidate(data_dir):
    assert becomes_current(data_dir, "v1", candidate=False, promote=False)
    assert becomes_current(data_dir, "v1", candidate=False, promote=True)
    assert not becomes_current(data_dir, "v1", candidate=True, promote=False)


def test_a_build_beside_a_served_model_is_a_candidate_unless_promoted(data_dir):
    artifacts.set_current(data_dir, "v1")
    assert not becomes_current(data_dir, "v2", candidate=False, promote=False)
    assert not becomes_current(data_dir, "v2", candidate=True, promote=False)
    assert becomes_current(data_dir, "v2", candidate=False, promote=True)
    # The served version built again: nothing moves either way.
    assert not becomes_current(data_dir, "v1", candidate=False, promote=True)


def test_promote_is_refused_while_a_rollout_decides(data_dir):
    artifacts.set_current(data_dir, "v1")
    running = rollout_state.RolloutState(stable="v1", candidate="v2", status="running")
    rollout_state.save(data_dir, running)
    with pytest.raises(PromoteRefused, match="a rollout of v2 is running"):
        becomes_current(data_dir, "v3", candidate=False, promote=True)
    # A candidate beside it is fine: the rollout still decides.
    assert not becomes_current(data_dir, "v3", candidate=False, promote=False)
    rollout_state.save(data_dir, running.model_copy(update={"status": "rolled_back"}))
    assert becomes_current(data_dir, "v3", candidate=False, promote=True)


def test_candidate_and_promote_contradict(data_dir):
    with pytest.raises(PromoteRefused, match="contradict"):
        becomes_current(data_dir, "v1", candidate=True, promote=True)


def test_the_cli_refuses_promote_during_a_rollout_before_training(data_dir):
    artifacts.set_current(data_dir, "v1")
    rollout_state.save(
        data_dir, rollout_state.RolloutState(stable="v1", candidate="v2", status="paused")
    )
    dataset = write_shop(data_dir / "export", ShopSize(items=60, users=40, events=4_000), seed=3)
    arguments = ["build", "--data-dir", str(data_dir), "--dataset", str(dataset), "--promote"]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 1, result.output
    assert "a rollout of v2 is paused" in " ".join(result.output.split())
    # Nothing was trained or written beside the pointer and the state.
    assert sorted(p.name for p in (data_dir / "artifacts").iterdir()) == ["CURRENT"]
    assert artifacts.current_version(data_dir) == "v1"
