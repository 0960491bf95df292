"""The gateway's impression records: the surface check and the rollout arm
a version is in, from the ranker's rollout state."""

import pytest

from recserve_delivery import state as rollout_state
from recserve_kit.errors import InvalidArgument
from services.gateway.impressions import RolloutArms, check_surface


def test_the_surface_defaults_and_a_bad_one_is_refused():
    assert check_surface("") == "default" and check_surface("home:top-1") == "home:top-1"
    for bad in ("home page", "x" * 65, "é"):
        with pytest.raises(InvalidArgument, match="surface"):
            check_surface(bad)


def test_the_arm_follows_the_rollout_state(tmp_path):
    arms = RolloutArms(tmp_path)
    arms.reload()
    assert arms.arm("v1") == ""  # no rollout at all
    state = rollout_state.RolloutState(stable="v1", candidate="v2", status="running")
    rollout_state.save(tmp_path, state)
    arms.reload()
    assert (arms.arm("v1"), arms.arm("v2"), arms.arm("v3"), arms.arm("")) == (
        "stable",
        "candidate",
        "",
        "",
    )
    rollout_state.path(tmp_path).write_text("{broken")
    arms.reload()  # a damaged file keeps what was known
    assert arms.arm("v2") == "candidate"
    rollout_state.save(tmp_path, state.model_copy(update={"status": "promoted"}))
    arms.reload()
    assert arms.arm("v2") == ""  # over: no arms
