"""`recserve-stack backup` / `restore` on a small data dir of real files: the
event logs' prefix copy while a writer appends (every line whole, every
line written before the copy began in it), secrets' modes kept, and the
refusals (a stack answering on the data dir's sockets, a data dir that is
not empty, an incomplete or altered backup)."""

from __future__ import annotations

import json
import socket
import stat
import threading
from pathlib import Path

import pytest

from recserve_kit.jsonl_log import JsonlLog, read_records
from recserve_model import artifacts
from recserve_stack.backup import BackupError, backup
from recserve_stack.backup_files import (
    CHUNK,
    copy_file,
    copy_log,
    copy_prefix,
    log_lengths,
    stack_running,
)
from recserve_stack.restore import restore
from recserve_stack.settings import StackSettings
from tests.helpers import poll_until


def test_a_torn_last_line_is_not_copied(tmp_path):
    source = tmp_path / "log.jsonl"
    source.write_bytes(b'{"n":1}\n{"n":2}\n{"n":')
    assert copy_prefix(source, source.stat().st_size, tmp_path / "copy.jsonl") == (16, 2)
    assert (tmp_path / "copy.jsonl").read_bytes() == b'{"n":1}\n{"n":2}\n'
    # A length that ends mid-line: the line is left out too.
    assert copy_prefix(source, 12, tmp_path / "short.jsonl") == (8, 1)


def test_the_copy_of_a_log_being_written_is_a_whole_prefix(tmp_path):
    directory = tmp_path / "events" / "app"
    log = JsonlLog(directory, background=False, max_bytes=256 << 10)  # several files
    acknowledged: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            batch = [{"event_id": f"e{n + i}", "pad": "x" * (n % 500)} for i in range(20)]
            log.write(batch)  # on disk (fsynced) when it returns, as the gateway's
            acknowledged.extend(r["event_id"] for r in batch)
            n += 20

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        poll_until(lambda: len(acknowledged) >= 4_000, 30, 0.01, "several files written")
        before = list(acknowledged)  # acknowledged before the backup began
        lengths = log_lengths(directory)
        # The writer goes on while the files are copied.
        poll_until(lambda: len(acknowledged) >= len(before) + 200, 30, 0.01, "more written")
        summary = copy_log(lengths, tmp_path / "events", tmp_path / "backup")
    finally:
        stop.set()
        thread.join()
        log.close()
    copied = tmp_path / "backup" / "app"
    lines = [
        line for path in sorted(copied.rglob("*.jsonl")) for line in path.read_bytes().split(b"\n")
    ]
    # Whole lines; empty where the listing caught a file the log had just
    # opened (its first line not yet written).
    assert all(
        p.read_bytes().endswith(b"\n") or p.stat().st_size == 0 for p in copied.rglob("*.jsonl")
    )
    ids = [json.loads(line)["event_id"] for line in lines if line]  # every line parses
    assert summary["events"] == len(ids)
    assert len(before) > 100 and set(before) <= set(ids)
    assert len(ids) == len(set(ids))
    for path in copied.rglob("*.jsonl"):  # each file a prefix of its source
        source = directory / path.relative_to(copied)
        assert source.read_bytes().startswith(path.read_bytes())
    assert len(list(read_records(directory))) > len(ids)  # the writer did go on


def test_a_preallocated_file_is_copied_with_its_holes(tmp_path):
    source = tmp_path / "open-1"
    with source.open("wb") as f:
        f.write(b"wal header")
        f.truncate(32 << 20)  # as Qdrant preallocates its WAL and segments
    source.chmod(0o640)
    copy_file(source, tmp_path / "copy")
    copied = tmp_path / "copy"
    assert copied.read_bytes() == source.read_bytes()
    assert copied.stat().st_blocks * 512 <= CHUNK  # only the block that holds data
    assert stat.S_IMODE(copied.stat().st_mode) == 0o640


def small_data_dir(root: Path) -> Path:
    data_dir = root / "data"
    version = data_dir / "artifacts" / "v1"
    version.mkdir(parents=True)
    (version / "model.bin").write_bytes(b"weights")
    artifacts.write_manifest(version, "v1", {})
    (data_dir / "artifacts" / "CURRENT").write_text("v1")
    (data_dir / "artifacts" / "v0-unused").mkdir()
    JsonlLog(data_dir / "events" / "app", background=False).write([{"event_id": "a"}])
    (data_dir / "rollout").mkdir()
    (data_dir / "rollout" / "ranker.json").write_text("{}")
    (data_dir / "auth").mkdir(mode=0o700)
    token = data_dir / "auth" / "app.token"
    token.write_text("secret")
    token.chmod(0o600)
    (data_dir / "logs").mkdir()
    (data_dir / "logs" / "gateway.log").write_text("not backed up")
    return data_dir


def test_backup_and_restore_keep_what_serves_and_the_secrets_modes(tmp_path):
    data_dir = small_data_dir(tmp_path)
    manifest = backup(data_dir, tmp_path / "backup")
    assert manifest["current"] == "v1"
    assert manifest["model"]["artifacts"] == ["v1"]
    assert manifest["events"]["app"]["events"] == 1
    assert manifest["secrets"] == ["auth"]
    assert "logs/gateway.log" not in manifest["files"]

    target = tmp_path / "restored"
    restore(tmp_path / "backup", target)
    assert (target / "artifacts" / "CURRENT").read_text() == "v1"
    artifacts.verify(target / "artifacts" / "v1")
    assert not (target / "artifacts" / "v0-unused").exists()
    assert [r["event_id"] for r in read_records(target / "events" / "app")] == ["a"]
    assert stat.S_IMODE((target / "auth" / "app.token").stat().st_mode) == 0o600
    assert stat.S_IMODE((target / "auth").stat().st_mode) == 0o700
    assert not (target / "logs").exists()

    with pytest.raises(BackupError, match="not empty"):
        restore(tmp_path / "backup", target)
    (target / "artifacts" / "CURRENT").write_text("v0-unused")
    (target / "logs").mkdir()
    restore(tmp_path / "backup", target, force=True)
    assert (target / "artifacts" / "CURRENT").read_text() == "v1"
    assert (target / "logs").exists()  # what the backup does not hold stays

    with pytest.raises(BackupError, match="not empty"):
        backup(data_dir, tmp_path / "backup")


def test_the_datasets_the_next_build_starts_from_are_kept(tmp_path):
    """The data dir's own dataset and the retrain snapshot the served
    artifact was built from: `make run` after a restore builds from them
    (without them it stops: the dataset "is not there any more")."""
    data_dir = small_data_dir(tmp_path)
    for name in ("dataset", "snapshots/s2", "snapshots/s1-older"):
        (data_dir / name).mkdir(parents=True)
        (data_dir / name / "dataset.yaml").write_text(f"name: {name}")
    version = data_dir / "artifacts" / "v1"
    artifacts.write_manifest(version, "v1", {"dataset_dir": str(data_dir / "snapshots" / "s2")})
    manifest = backup(data_dir, tmp_path / "backup")
    assert manifest["datasets"] == ["dataset", "snapshots/s2"]
    restore(tmp_path / "backup", tmp_path / "restored")
    assert (tmp_path / "restored" / "snapshots" / "s2" / "dataset.yaml").read_text() == (
        "name: snapshots/s2"
    )
    assert (tmp_path / "restored" / "dataset" / "dataset.yaml").exists()
    assert not (tmp_path / "restored" / "snapshots" / "s1-older").exists()


def test_an_altered_or_incomplete_backup_is_refused(tmp_path):
    data_dir = small_data_dir(tmp_path)
    backup(data_dir, tmp_path / "backup", secrets=False)
    (tmp_path / "backup" / "data" / "rollout" / "ranker.json").write_text('{"x": 1}')
    with pytest.raises(BackupError, match="differs from the manifest"):
        restore(tmp_path / "backup", tmp_path / "restored")
    (tmp_path / "backup" / "manifest.json").unlink()
    with pytest.raises(BackupError, match="incomplete"):
        restore(tmp_path / "backup", tmp_path / "restored")
    assert not (tmp_path / "restored").exists()


def test_a_stack_answering_on_the_data_dirs_sockets_is_seen(tmp_path):
    settings = StackSettings(data_dir=tmp_path / "data")
    settings.socket_dir.mkdir(parents=True)
    assert stack_running(settings) == []
    stale = settings.socket("ranker")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(stale))
    listener.close()  # a stopped stack's leftover file: nobody answers
    assert stack_running(settings) == []
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        live.bind(str(settings.socket("gateway")))
        live.listen()
        assert stack_running(settings) == ["gateway.sock"]
    finally:
        live.close()
