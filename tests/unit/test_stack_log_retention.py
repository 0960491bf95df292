"""The local stack's own files stay bounded: a component's log rotates by
size as the runner writes it, and the impressions log drops days past its
keep (the Envoy access log's rotation runs against a real Envoy in
tests/e2e/test_log_retention.py)."""

import asyncio
import io
import sys
import time

from recserve_kit.jsonl_log import JsonlLog
from recserve_stack.runner import Component, Runner

TALK = "import sys\nfor n in range(3000): print(f'line {n:05d} ' + 'x' * 40)\nsys.stdout.flush()"


async def always_ready() -> bool:
    return True


def test_a_components_log_rotates_past_its_size_and_keeps_the_newest_lines(tmp_path):
    talker = Component("talker", [sys.executable, "-c", TALK], always_ready)
    runner = Runner([talker], tmp_path, out=io.StringIO(), log_max_bytes=20_000)

    async def run() -> None:
        await runner.start()
        assert talker.process is not None
        await talker.process.wait()
        await runner.stop()

    asyncio.run(run())
    current, older = tmp_path / "talker.log", tmp_path / "talker.log.1"
    assert current.stat().st_size <= 20_000 and older.stat().st_size <= 20_000
    assert sorted(tmp_path.iterdir()) == [current, older]  # one older file, no more
    assert current.read_text().splitlines()[-1].startswith("line 02999 ")
    lines = older.read_text().splitlines() + current.read_text().splitlines()
    numbers = [int(line.split()[1]) for line in lines]
    assert numbers == list(range(numbers[0], 3000))  # the newest, in order, none lost


def test_impressions_older_than_their_keep_go_as_a_new_day_begins(tmp_path):
    def day(days_ago: int) -> str:
        return time.strftime("%Y-%m-%d", time.gmtime(time.time() - days_ago * 86_400))

    for days_ago in (40, 31, 29, 1):
        (tmp_path / day(days_ago)).mkdir()
        (tmp_path / day(days_ago) / "00-w.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "not-a-day").mkdir()
    log = JsonlLog(tmp_path, background=False, keep_days=30)
    log.write([{"recommendation_id": "r1"}])
    log.close()
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == sorted([day(29), day(1), day(0), "not-a-day"])
    # Every day is kept without a keep.
    every = tmp_path / "every"
    (every / day(45)).mkdir(parents=True)
    log = JsonlLog(every, background=False)
    log.write([{"recommendation_id": "r2"}])
    log.close()
    assert sorted(p.name for p in every.iterdir()) == [day(45), day(0)]
