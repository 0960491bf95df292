"""The stack runner's stop with real child processes: the graceful ones get
SIGTERM and their grace; one stopped by KILL (Triton) is killed once they
are down, not sent a SIGTERM it could hang on."""

import io
import signal
import sys

from recserve_stack.runner import Component, Runner


def ready_once(path):
    """Ready once the child has written ``path``: its signal handling is set."""

    async def ready() -> bool:
        return path.exists() and path.stat().st_size > 0

    return ready


async def test_a_component_stopped_by_kill_is_killed_once_the_graceful_ones_are_down(tmp_path):
    pid_file, seen = tmp_path / "triton.pid", tmp_path / "seen"
    # Ignores SIGTERM, as a hung Triton would.
    deaf = [
        sys.executable,
        "-c",
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)",
    ]
    # On SIGTERM, records whether the other is still up (it calls it), then exits.
    handling = tmp_path / "caller.ready"
    graceful = [
        sys.executable,
        "-c",
        "import os, signal, sys, time\n"
        "def stop(*_):\n"
        f"    os.kill(int(open({str(pid_file)!r}).read()), 0)\n"
        f"    open({str(seen)!r}, 'w').write('up')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"open({str(handling)!r}, 'w').write('handling')\n"
        "time.sleep(600)",
    ]
    triton = Component("triton", deaf, ready_once(pid_file), stop_signal="KILL")
    caller = Component("caller", graceful, ready_once(handling))
    out = io.StringIO()
    runner = Runner([triton, caller], tmp_path / "logs", out=out, stop_timeout_s=60)
    await runner.start()
    await runner.stop()
    assert caller.process is not None and caller.process.returncode == 0
    assert seen.read_text() == "up"  # the caller stopped while Triton still ran
    assert triton.process is not None and triton.process.returncode == -signal.SIGKILL
    assert "did not stop in time" not in out.getvalue()
