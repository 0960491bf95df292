"""Fixtures the delivery rehearsals share."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.delivery.cycles import CYCLES, ROOT


@pytest.fixture
def no_cycle_left(stack):
    """A test that failed mid-cycle leaves neither its cycle nor its rollout
    to the next test (which would be refused: one cycle at a time)."""
    yield
    left = [cycle for cycle in CYCLES if cycle.poll() is None]
    CYCLES.clear()
    for cycle in left:
        cycle.kill()
        cycle.wait(30)
    if left:
        command = [sys.executable, "-m", "recserve_stack", "rollout", "abort"]
        subprocess.run(command, env=stack.env, cwd=ROOT, capture_output=True, timeout=60)
