"""bench load ends early when asked (SIGTERM, SIGINT or its stop event):
requests not yet due are not sent, those sent are answered and counted,
and the record says how long it ran. A stand-in RecommendService answers,
the load generator being the module under test."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from bench.load import run_load
from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc
from tests.helpers import poll_until

ROOT = Path(__file__).resolve().parents[2]


class Answers(recommend_pb2_grpc.RecommendServiceServicer):
    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def Recommend(self, request, context):
        with self.lock:
            self.calls += 1
        return pb.RecommendResponse(model_version="stand-in")


@pytest.fixture
def server():
    answers = Answers()
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    recommend_pb2_grpc.add_RecommendServiceServicer_to_server(answers, grpc_server)
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    yield f"127.0.0.1:{port}", answers
    grpc_server.stop(0)


def test_a_stopped_load_sends_no_more_and_reports_what_it_sent(server):
    target, answers = server

    async def stopped_after_a_second():
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(1.0, stop.set)
        return await run_load(target, rate=50, duration_s=60, stop=stop)

    result = asyncio.run(stopped_after_a_second())
    assert 0 < result.sent < 50 * 60
    assert result.ok == result.sent and not result.errors
    assert result.duration_s < 60
    assert answers.calls == 20 + result.sent  # the warm-up's 20, then only what it counted


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_bench_load_ends_on_a_signal_with_its_record(server, tmp_path, signum):
    target, answers = server
    record = tmp_path / "load.json"
    command = [sys.executable, "-m", "bench", "load", "--target", target, "--rate", "20",
               "--duration", "300", "--out", str(record)]  # fmt: skip
    load = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        poll_until(lambda: answers.calls > 25, 60, what="the load under way")
        load.send_signal(signum)
        output, _ = load.communicate(timeout=30)
    finally:
        load.kill()
    assert load.returncode == 0, output
    assert "(stopped)" in output, output
    summary = json.loads(record.read_text())
    assert 0 < summary["sent"] == summary["ok"] and summary["errors"] == {}, summary
    assert summary["duration_s"] < 300, summary
