"""The append-only JSON Lines log: records land whole, in order, in hourly
files named by writer; a full file rolls to the next part; a full queue
drops and counts; a torn last line is skipped by readers; what is queued at
close is written."""

import json
import os
import shutil
import threading
import time

import pytest

from recserve_kit.jsonl_log import JsonlLog, JsonlTail, read_files, read_records
from tests.helpers import poll_until


def test_records_are_written_in_order_by_the_writer_thread(tmp_path):
    log = JsonlLog(tmp_path, flush_s=0.05)
    try:
        for n in range(100):
            assert log.append({"n": n})
        poll_until(lambda: log.written == 100 or None, 10, 0.05, "100 records written")
        assert [r["n"] for r in read_records(tmp_path)] == list(range(100))
        (path,) = tmp_path.rglob("*.jsonl")
        assert path.parent.name == time.strftime("%Y-%m-%d", time.gmtime())
        assert log.writer in path.name
    finally:
        log.close()


def test_a_full_file_rolls_to_the_next_part(tmp_path):
    log = JsonlLog(tmp_path, flush_s=3600, max_bytes=200)
    for n in range(30):
        log.append({"n": n, "pad": "x" * 20})
        log.flush()
    log.close()
    files = sorted(tmp_path.rglob("*.jsonl"))
    assert len(files) > 1
    assert all(f.stat().st_size < 200 + 60 for f in files)
    assert sorted(r["n"] for r in read_records(tmp_path)) == list(range(30))


def test_a_full_queue_drops_and_counts_and_close_writes_the_rest(tmp_path):
    log = JsonlLog(tmp_path, max_queue=5, flush_s=3600)
    accepted = [log.append({"n": n}) for n in range(8)]
    assert accepted == [True] * 5 + [False] * 3 and log.dropped == 3
    log.close()
    assert [r["n"] for r in read_records(tmp_path)] == [0, 1, 2, 3, 4]


def test_a_torn_last_line_is_skipped(tmp_path):
    day = tmp_path / "2026-01-01"
    day.mkdir()
    (day / "00-host-1.jsonl").write_text(json.dumps({"n": 1}) + "\n" + '{"n": 2, "ite')
    assert list(read_records(tmp_path)) == [{"n": 1}]


def test_an_unwritable_directory_keeps_records_queued_and_the_writer_alive(tmp_path):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    log = JsonlLog(blocked, flush_s=0.01)
    log.append({"n": 1})
    poll_until(lambda: log.failed_flushes >= 3 or None, 10, 0.01, "three failed flushes")
    assert log._thread.is_alive() and len(log.queue) == 1 and log.written == 0
    log._stop.set()
    log._thread.join()


def test_a_tail_reads_only_what_was_appended_and_whole_lines(tmp_path):
    old, today = tmp_path / "2020-01-01", tmp_path / "2026-12-01"
    old.mkdir()
    today.mkdir()
    (old / "00-a.jsonl").write_text('{"n": 0}\n')
    path = today / "10-a.jsonl"
    path.write_text('{"n": 1}\n{"n": 2')
    since = 1764547200.0 + 3600  # 2026-12-01 01:00 UTC: the 2020 folder is skipped
    tail = JsonlTail(tmp_path, since)
    assert tail.read_new() == [{"n": 1}]
    with path.open("a") as out:
        out.write('}\n{"n": 3}\n')
    (today / "10-b.jsonl").write_text('{"n": 4}\n')
    assert tail.read_new() == [{"n": 2}, {"n": 3}, {"n": 4}]
    assert tail.read_new() == []
    assert [r["n"] for r in JsonlTail(tmp_path).read_new()] == [0, 1, 2, 3, 4]


def test_a_log_written_only_in_the_call_runs_no_thread(tmp_path):
    def writers() -> list[threading.Thread]:
        # By name: other tests' threads on this worker come and go meanwhile.
        return [t for t in threading.enumerate() if t.name == "jsonl-log"]

    before = writers()
    log = JsonlLog(tmp_path, background=False)
    assert writers() == before
    log.write([{"n": 1}, {"n": 2}])
    assert [r["n"] for r in read_records(tmp_path)] == [1, 2]  # on disk before close
    with pytest.raises(RuntimeError, match="writer thread"):
        log.append({"n": 3})
    log.close()


def test_a_tail_and_a_reader_skip_days_removed_under_them(tmp_path):
    """Retention and compaction remove day folders while gateways follow the
    log: a follower forgets the removed files, a reader skips them."""
    for day in ("2026-01-01", "2026-01-02"):
        (tmp_path / day).mkdir()
        (tmp_path / day / "10-w.jsonl").write_text(json.dumps({"day": day}) + "\n")
    tail = JsonlTail(tmp_path)
    assert [r["day"] for r in tail.read_new()] == ["2026-01-01", "2026-01-02"]
    listed = sorted(tmp_path.rglob("*.jsonl"))
    shutil.rmtree(tmp_path / "2026-01-01")
    assert tail.read_new() == [] and list(tail.read_to) == [listed[1]]
    assert [r["day"] for r in read_files(listed)] == ["2026-01-02"]


def test_a_tail_can_leave_out_one_writers_files_its_parts_included(tmp_path):
    """The events API's duplicate check reads back only other gateways'
    records (its own it remembers as it writes them): every part of its own
    files is left out, a writer whose name merely starts with its name is not."""
    own, other, longer = (JsonlLog(tmp_path, background=False, max_bytes=40) for _ in range(3))
    own.writer, other.writer, longer.writer = "host-7", "host-8", "host-77"
    for n in range(3):  # past max_bytes: own rolls to its parts -1 and -2 (host-7-1, host-7-2)
        own.write([{"n": f"own{n}", "pad": "x" * 40}])
    other.write([{"n": "other"}])
    longer.write([{"n": "longer"}])
    assert len(list(tmp_path.rglob("*-host-7*.jsonl"))) == 4  # own's three, longer's one
    tail = JsonlTail(tmp_path)
    assert sorted(r["n"] for r in tail.read_new(skip_writer="host-7")) == ["longer", "other"]
    own.write([{"n": "own3"}])
    assert tail.read_new(skip_writer="host-7") == []
    assert sorted(r["n"] for r in JsonlTail(tmp_path).read_new()) == [
        "longer", "other", "own0", "own1", "own2", "own3",
    ]  # fmt: skip
    for log in (own, other, longer):
        log.close()


def test_a_starting_tail_reads_back_only_the_newest_records_then_follows(tmp_path, monkeypatch):
    """A follower that starts (the events API's duplicate check after a
    restart) reads only the newest records it keeps, from the files' ends
    back, newest file first, across read blocks; a torn last line waits;
    ``read_new`` then gives only what is appended after."""
    monkeypatch.setattr("recserve_kit.jsonl_log.BLOCK", 64)  # several blocks a file
    day = tmp_path / "2026-12-01"
    day.mkdir()
    older, newer = day / "10-b.jsonl", day / "10-a.jsonl"  # a sorts first, b was written first
    older.write_text("".join(json.dumps({"n": n, "pad": "x" * n}) + "\n" for n in range(30)))
    newer.write_text("".join(json.dumps({"n": n}) + "\n" for n in range(30, 40)) + '{"n": 4')
    stamp = time.time()
    os.utime(older, (stamp - 60, stamp - 60))
    os.utime(newer, (stamp, stamp))
    tail = JsonlTail(tmp_path)
    assert [r["n"] for r in tail.read_newest(15)] == list(range(25, 40))
    assert [r["n"] for r in JsonlTail(tmp_path).read_newest(100)] == list(range(40))
    with newer.open("a") as out:
        out.write('0}\n{"n": 41}\n')
    assert [r["n"] for r in tail.read_new()] == [40, 41]
    assert tail.read_new() == []
