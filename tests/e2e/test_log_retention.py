"""Envoy's access log (a line a request) rotated on the running stack: the
file past its size is renamed .1 and Envoy, told through its admin port,
writes its next lines to a new file (recserve_stack.retention)."""

from __future__ import annotations

import pytest

from recserve_stack.envoy import ENVOY_ACCESS_LOG
from recserve_stack.retention import rotate_access_log
from tests.helpers import full_answer, poll_until

pytestmark = pytest.mark.local_stack_only


def test_the_access_log_rotates_and_envoy_writes_a_new_one(stack, stub):
    log = stack.data_dir / "logs" / ENVOY_ACCESS_LOG
    admin = f"http://127.0.0.1:{stack.port('envoy_admin')}"
    full_answer(stub, "42", k=5)
    poll_until(lambda: log.exists() and log.stat().st_size > 0, 30, 0.1, "an access log line")
    assert not rotate_access_log(log, 1 << 40, admin)  # under its size: left as it is
    assert rotate_access_log(log, 0, admin)
    older = log.with_name(log.name + ".1")
    assert "/recserve.recommend.v1.RecommendService/Recommend" in older.read_text()
    # Without the reopen Envoy would go on writing to the renamed file, and
    # no new one would appear.
    full_answer(stub, "42", k=5)
    poll_until(lambda: log.exists() and "Recommend" in log.read_text(), 30, 0.1, "a new log")
