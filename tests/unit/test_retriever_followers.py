"""What the writer retriever reads of its followers (services/retriever/
followers.py): a live follower that lacks a generation is waited for, one
whose status has not been rewritten for STALE_S (dead) is not."""

import json
import time

from services.retriever import followers


def test_a_live_follower_without_the_generation_is_waited_for_a_dead_one_is_not(tmp_path):
    assert followers.lacking(tmp_path, "g0002") == []  # no follower
    followers.write(tmp_path, current="g0001", prepared="")
    assert followers.lacking(tmp_path, "g0002") == [followers.own_name()]
    followers.write(tmp_path, current="g0001", prepared="g0002")
    assert followers.lacking(tmp_path, "g0002") == []
    assert followers.lacking(tmp_path, "g0001") == []  # as current too
    dead = followers.folder(tmp_path) / "other-host-1.json"
    at = time.time() - followers.STALE_S - 1
    dead.write_text(json.dumps({"current": "g0000", "prepared": "", "at": at}))
    assert followers.lacking(tmp_path, "g0002") == []
    followers.remove(tmp_path)
    assert [p.name for p in followers.folder(tmp_path).iterdir()] == [dead.name]
