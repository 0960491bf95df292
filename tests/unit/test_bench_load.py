"""bench load ends early when asked (SIGTERM, SIGINT or its stop event):
requests not yet due are not sent, those sent are answered and counted,
and the record says how long it ran. A stand-in RecommendService answers,
the load generator being the module under test (the stand-in is the
clients' tests' own, tests/clients/fake_server.py)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.load import run_load
from tests.clients.fake_server import fake_server
from tests.helpers import poll_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server():
    """The clients' scripted RecommendService, answering every call."""
    with fake_server() as (address, script):
        yield address, script


def test_a_stopped_load_sends_no_more_and_reports_what_it_sent(server):
    target, script = server

    async def stopped_after_a_second():
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(1.0, stop.set)
        return await run_load(target, rate=50, duration_s=60, stop=stop)

    result = asyncio.run(stopped_after_a_second())
    assert 0 < result.sent < 50 * 60
    assert result.ok == result.sent and not result.errors
    assert result.duration_s < 60
    assert len(script.attempts) == 20 + result.sent  # the warm-up's 20, then only what it counted


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_bench_load_ends_on_a_signal_with_its_record(server, tmp_path, signum):
    target, script = server
    record = tmp_path / "load.json"
    command = [sys.executable, "-m", "bench", "load", "--target", target, "--rate", "20",
               "--duration", "300", "--out", str(record)]  # fmt: skip
    load = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        poll_until(lambda: len(script.attempts) > 25, 60, what="the load under way")
        load.send_signal(signum)
        output, _ = load.communicate(timeout=30)
    finally:
        load.kill()
    assert load.returncode == 0, output
    assert "(stopped)" in output, output
    summary = json.loads(record.read_text())
    assert 0 < summary["sent"] == summary["ok"] and summary["errors"] == {}, summary
    assert summary["duration_s"] < 300, summary
