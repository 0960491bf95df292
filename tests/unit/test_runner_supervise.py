"""The stack runner's supervision with real child processes (small sleepers
standing in for the services): each component comes back on its own."""

import asyncio
import io
import os
import signal
import sys

import psutil

from recserve_stack.runner import Component, Runner

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


async def _until(condition, timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def _kill(component: Component) -> None:
    assert component.process is not None
    os.kill(component.process.pid, signal.SIGKILL)


async def test_a_component_that_dies_while_another_comes_back_is_restarted_at_once(tmp_path):
    """A restart that is still waiting for its component to be ready does
    not hold up noticing, and restarting, another that dies meanwhile."""
    held = {"slow": False}

    async def slow_ready() -> bool:
        return not held["slow"]

    async def ready() -> bool:
        return True

    slow, quick = Component("slow", SLEEPER, slow_ready), Component("quick", SLEEPER, ready)
    out = io.StringIO()
    runner = Runner([slow, quick], tmp_path / "logs", out=out, start_timeout_s=60)
    await runner.start()
    supervising = asyncio.create_task(runner.supervise(max_restarts=2))
    try:
        held["slow"] = True  # its comeback waits until it is released
        _kill(slow)
        await _until(lambda: "slow | exited with code -9; restarting (1 of 2" in out.getvalue())
        first_quick = quick.process
        _kill(quick)
        await _until(lambda: "quick | ready again" in out.getvalue())
        assert "quick | exited with code -9; restarting (1 of 2" in out.getvalue()
        assert quick.process is not first_quick and quick.process.returncode is None
        assert "slow | ready again" not in out.getvalue()
        held["slow"] = False
        await _until(lambda: "slow | ready again" in out.getvalue())
        # Past its restarts within the window, a component ends supervision.
        _kill(quick)
        await _until(lambda: out.getvalue().count("quick | ready again") == 2)
        _kill(quick)
        assert await asyncio.wait_for(supervising, 20) is quick
        assert slow.process is not None and slow.process.returncode is None
    finally:
        supervising.cancel()
        await runner.stop()
    assert all(c.process is not None and c.process.returncode is not None for c in (slow, quick))


async def test_a_component_whose_children_outlive_it_is_restarted_at_once(tmp_path):
    """Triton's python-backend stubs hold its stdout after Triton is killed:
    its exit is noticed by its exit code, not when the last holder of its
    output closes it, and the restart ends the children it left behind."""

    async def ready() -> bool:
        return True

    parent = Component("parent", ["sh", "-c", "sleep 600 & exec sleep 600"], ready)
    out = io.StringIO()
    runner = Runner([parent], tmp_path / "logs", out=out, start_timeout_s=60)
    await runner.start()
    supervising = asyncio.create_task(runner.supervise())
    try:
        assert parent.process is not None
        leader = psutil.Process(parent.process.pid)
        await _until(lambda: len(leader.children()) == 1)
        left_behind = leader.children()[0]
        _kill(parent)
        await _until(lambda: "parent | ready again" in out.getvalue())
        assert "parent | exited with code -9; restarting (1 of 5" in out.getvalue()
        await _until(lambda: not left_behind.is_running() or left_behind.status() == "zombie")
    finally:
        supervising.cancel()
        await runner.stop()


async def test_a_component_killed_again_before_it_was_ready_is_restarted_again(tmp_path):
    """A second kill while the runner still waits for the restarted process
    to be ready (a test or a crash loop can be quicker than its probes) is
    one more exit under the restart limit, not the end of the stack."""
    held = {"ready": True}

    async def ready() -> bool:
        return held["ready"]

    flaky = Component("flaky", SLEEPER, ready)
    out = io.StringIO()
    runner = Runner([flaky], tmp_path / "logs", out=out, start_timeout_s=60)
    await runner.start()
    supervising = asyncio.create_task(runner.supervise(max_restarts=3))
    try:
        held["ready"] = False
        started = flaky.process
        _kill(flaky)
        await _until(lambda: flaky.process is not started)
        first_restart = flaky.process
        assert "flaky | exited with code -9; restarting (1 of 3" in out.getvalue()
        _kill(flaky)
        # The runner says it restarts, then starts the new process.
        await _until(lambda: "flaky | exited with code -9; restarting (2 of 3" in out.getvalue())
        await _until(lambda: flaky.process is not first_restart)
        held["ready"] = True
        await _until(lambda: "flaky | ready again" in out.getvalue())
        assert not supervising.done()
        assert flaky.process is not None and flaky.process.returncode is None
    finally:
        supervising.cancel()
        await runner.stop()


async def test_what_a_killed_component_leaves_is_removed_before_each_start_and_after_the_stop(
    tmp_path,
):
    """Triton's shared memory outlives a kill: the runner clears it before
    the first start (a runner killed last time), before a restart, and once
    the stack has stopped."""
    left = tmp_path / "left"

    async def ready() -> bool:
        return True

    def clear() -> None:
        calls.append(left.exists())
        left.unlink(missing_ok=True)

    calls: list[bool] = []
    leaves = [sys.executable, "-c", f"open({str(left)!r}, 'w'); import time; time.sleep(600)"]
    component = Component("leaves", leaves, ready, leftovers=clear)
    out = io.StringIO()
    runner = Runner([component], tmp_path / "logs", out=out, start_timeout_s=60)
    left.touch()  # as a runner killed before left it
    await runner.start()
    supervising = asyncio.create_task(runner.supervise())
    try:
        await _until(left.exists)
        _kill(component)
        await _until(lambda: "leaves | ready again" in out.getvalue())
        await _until(left.exists)
    finally:
        supervising.cancel()
        await runner.stop()
    assert calls == [True, True, True] and not left.exists()
