"""Bench tables printed to a pipe (a log, CI) keep every header and column."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECOMMEND = "/recserve.recommend.v1.RecommendService/Recommend"
START_NS = 1_700_000_000 * 10**9


def spans(count):
    for n in range(count):
        start = START_NS + n * 10**8
        yield {
            "traceId": f"{n + 1:032x}",
            "spanId": f"{n + 1:016x}",
            "name": RECOMMEND,
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + (20 + n) * 10**6),
        }
        yield {
            "traceId": f"{n + 1:032x}",
            "spanId": f"{n + 1:08x}{1:08x}",
            "parentSpanId": f"{n + 1:016x}",
            "name": "gateway.features",
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 2 * 10**6),
        }


def test_bench_report_to_a_pipe_prints_full_headers_and_every_column(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    export = {"resourceSpans": [{"scopeSpans": [{"spans": list(spans(20))}]}]}
    (traces / "gateway.jsonl").write_text(json.dumps(export) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    command = [sys.executable, "-m", "bench", "report", "--traces", str(traces)]
    command += ["--charts-dir", str(tmp_path / "charts")]
    # stdout is a pipe here, as in a log file or CI.
    result = subprocess.run(
        command,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()

    def line_with(*words):
        return next((line for line in lines if all(w in line for w in words)), None)

    # Each table's header on one line, nothing cut short ("featu...").
    assert line_with("group", "their mean ms", "features ms", "other ms", "envoy ms")
    assert line_with("stage", "of requests", "cap ms", "over cap", "tail mean ms")
    assert line_with("trace id", "end to end ms", "queued ms", "started (UTC)")
    assert "…" not in result.stdout
    # The slowest trace's row whole: its id and its end-to-end time.
    assert line_with(f"{20:032x}", "39.0", "full")
