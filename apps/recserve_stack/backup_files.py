"""Copying a live data dir's files for a backup (``recserve_stack.backup``):
append-only logs up to a length read once (whole lines only), files with
their holes and modes kept, SQLite through its own online backup, and the
size and sha256 of each file a backup holds; whether a stack answers on
the data dir's sockets; the code's version."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from recserve_stack.settings import StackSettings

CHUNK = 1 << 20
ROOT = Path(__file__).resolve().parents[2]
ZEROS = bytes(CHUNK)


def log_lengths(directory: Path) -> dict[Path, int]:
    """Every ``*.jsonl`` file below ``directory`` and its length now: the
    prefix a backup copies (files started later are not in it)."""
    if not directory.is_dir():
        return {}
    return {path: path.stat().st_size for path in sorted(directory.rglob("*.jsonl"))}


def copy_prefix(source: Path, length: int, target: Path) -> tuple[int, int]:
    """The first ``length`` bytes of ``source`` into ``target``, cut after
    the last newline among them; (bytes, lines) copied."""
    target.parent.mkdir(parents=True, exist_ok=True)
    copied = lines = whole = 0
    with source.open("rb") as src, target.open("wb") as dst:
        while copied < length:
            chunk = src.read(min(CHUNK, length - copied))
            if not chunk:
                break  # shorter than listed: never, for an append-only log
            dst.write(chunk)
            newlines = chunk.count(b"\n")
            if newlines:
                lines += newlines
                whole = copied + chunk.rfind(b"\n") + 1
            copied += len(chunk)
        dst.truncate(whole)
        dst.flush()
        os.fsync(dst.fileno())
    return whole, lines


def copy_log(lengths: dict[Path, int], source_root: Path, target_root: Path) -> dict[str, int]:
    """Each listed file's prefix, at the same path under ``target_root``."""
    summary = {"files": 0, "bytes": 0, "events": 0}
    for path, length in lengths.items():
        size, lines = copy_prefix(path, length, target_root / path.relative_to(source_root))
        summary["files"] += 1
        summary["bytes"] += size
        summary["events"] += lines
    return summary


def transient_name(name: str) -> bool:
    return name.endswith((".tmp", ".lock", "-journal", "-wal", "-shm"))


def transient(directory: str, names: list[str]) -> set[str]:
    return {name for name in names if transient_name(name)}


def copy_file(source: str | Path, target: str | Path) -> None:
    """``shutil.copy2`` that keeps holes: Qdrant preallocates its WAL and
    segment files (32 MiB each, mostly never written), and a plain copy
    would write every zero."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        while chunk := src.read(CHUNK):
            if chunk == ZEROS[: len(chunk)]:
                dst.seek(len(chunk), os.SEEK_CUR)
            else:
                dst.write(chunk)
        dst.truncate()
    shutil.copystat(source, target)


def sqlite_copy(source: Path, target: Path) -> None:
    """SQLite's online backup: one consistent state of the database while
    another process writes it."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def file_list(root: Path) -> dict[str, dict[str, Any]]:
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            digest = hashlib.sha256()
            with path.open("rb") as f:
                for block in iter(lambda: f.read(CHUNK), b""):
                    digest.update(block)
            files[str(path.relative_to(root))] = {
                "bytes": path.stat().st_size,
                "sha256": digest.hexdigest(),
            }
    return files


def code_version() -> str:
    try:
        result = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        commit = result.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return f"recserve {commit}"


def stack_running(settings: StackSettings) -> list[str]:
    """The stack's sockets that a process answers on (the local runner's
    services listen on ``socket_dir``; a stopped stack leaves at most
    files nobody answers on)."""
    answering = []
    directory = settings.socket_dir
    for path in sorted(directory.glob("*.sock")) if directory.is_dir() else ():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
            answering.append(path.name)
        except OSError:
            pass
        finally:
            probe.close()
    return answering
