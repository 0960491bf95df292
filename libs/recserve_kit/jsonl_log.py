"""An append-only log of JSON Lines written off the request path.

``append`` puts a record on a bounded in-memory queue and returns at once
(impressions); ``write`` writes and fsyncs before it returns (acknowledged
writes: events);
a writer thread drains it to ``<directory>/<UTC date>/<hour>-<writer>.jsonl``
every ``flush_s``, fsyncs, and starts a new file each hour or past
``max_bytes`` (``...-<n>.jsonl``). One writer per process (its host name and
pid name its files), so replicas never share a file and nothing needs a
lock across processes. Readers take every ``*.jsonl`` below the directory;
a line is whole or absent (a torn last line after a crash is skipped by
``read_records``).

What is lost: records still queued when the process is killed (at most
``flush_s`` of them), and those refused when the queue is full (counted).
"""

from __future__ import annotations

import calendar
import json
import logging
import os
import re
import shutil
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")  # a day folder's name


class JsonlLog:
    def __init__(
        self,
        directory: Path,
        max_queue: int = 100_000,
        flush_s: float = 0.2,
        max_bytes: int = 64 << 20,
        background: bool = True,
        keep_days: int = 0,
    ) -> None:
        """``background``: a writer thread flushes what ``append`` queues;
        without it only ``write`` (synchronous) writes. ``keep_days``: as
        each new day's file opens, the day folders older than this many
        days go (every writer's); 0 keeps every day."""
        self.directory = directory
        self.background = background
        self.max_queue = max_queue
        self.flush_s = flush_s
        self.max_bytes = max_bytes
        self.keep_days = keep_days
        self.writer = f"{socket.gethostname()}-{os.getpid()}"
        self.queue: deque[dict[str, Any]] = deque()
        self.written = 0
        self.dropped = 0
        self.failed_flushes = 0
        self._lock = threading.Lock()  # one writer of the file at a time
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jsonl-log", daemon=True)
        self._file: Any = None
        self._path: Path | None = None
        self._part = 0
        if background:
            self._thread.start()

    def append(self, record: dict[str, Any]) -> bool:
        """Queued for writing; False (and counted) when the queue is full."""
        if not self.background:
            raise RuntimeError("append needs the writer thread: JsonlLog(background=True)")
        if len(self.queue) >= self.max_queue:
            self.dropped += 1
            return False
        self.queue.append(record)
        return True

    def _target(self, now: float) -> Path:
        day = time.strftime("%Y-%m-%d", time.gmtime(now))
        hour = time.strftime("%H", time.gmtime(now))
        suffix = f"-{self._part}" if self._part else ""
        return self.directory / day / f"{hour}-{self.writer}{suffix}.jsonl"

    def _open(self, now: float) -> Any:
        target = self._target(now)
        if self._file is not None and target == self._path and self._file.tell() < self.max_bytes:
            return self._file
        if self._file is not None:
            self._file.close()
            if target == self._path:  # the same hour, past max_bytes: the next part
                self._part += 1
                target = self._target(now)
            else:
                self._part = 0
                target = self._target(now)
        if self.keep_days and not target.parent.exists():
            self.prune(now)
        target.parent.mkdir(parents=True, exist_ok=True)
        self._file = target.open("a", encoding="utf-8")
        self._path = target
        return self._file

    def prune(self, now: float) -> list[str]:
        """Removes the day folders older than ``keep_days`` before ``now``
        (several writers may race: a folder another removed is skipped)."""
        cutoff = time.strftime("%Y-%m-%d", time.gmtime(now - self.keep_days * 86_400))
        gone = []
        for day in sorted(self.directory.iterdir()) if self.directory.is_dir() else ():
            if day.is_dir() and DAY.fullmatch(day.name) and day.name < cutoff:
                shutil.rmtree(day, ignore_errors=True)
                gone.append(day.name)
        if gone:
            log.info("removed %d day(s) of %s older than %d days: %s",
                     len(gone), self.directory, self.keep_days, ", ".join(gone))  # fmt: skip
        return gone

    def flush(self) -> None:
        """Writes and fsyncs what is queued (the writer thread calls it)."""
        if not self.queue:
            return
        with self._lock:
            out = self._open(time.time())
            lines = []
            while self.queue:
                lines.append(json.dumps(self.queue.popleft(), separators=(",", ":")))
            self._write_lines(out, lines)

    def write(self, records: list[dict[str, Any]]) -> None:
        """Writes and fsyncs ``records`` now, before returning (blocking:
        call it from a worker thread)."""
        lines = [json.dumps(r, separators=(",", ":")) for r in records]
        with self._lock:
            self._write_lines(self._open(time.time()), lines)

    def _write_lines(self, out: Any, lines: list[str]) -> None:
        out.write("\n".join(lines) + "\n")
        out.flush()
        os.fsync(out.fileno())
        self.written += len(lines)

    def _run(self) -> None:
        complained = 0.0
        while not self._stop.wait(self.flush_s):
            try:
                self.flush()
            except OSError as exc:
                self.failed_flushes += 1
                # Kept queued and retried; said once a minute, not every flush.
                if time.monotonic() - complained > 60:
                    complained = time.monotonic()
                    log.error("cannot write the log under %s (%s); retrying", self.directory, exc)

    def close(self) -> None:
        """Stops the writer after writing what is queued."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.flush()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_records(directory: Path) -> Iterator[dict[str, Any]]:
    """Every whole record below ``directory``, file by file in name order."""
    return read_files(sorted(directory.rglob("*.jsonl")))


def hourly_files(directory: Path) -> dict[str, list[Path]]:
    """Every writer's files of each hour, by "<UTC date>/<hour>": the keys
    sort in time order (a reader that goes hour by hour holds one hour)."""
    found: dict[str, list[Path]] = {}
    for path in sorted(directory.rglob("*.jsonl")) if directory.is_dir() else ():
        found.setdefault(f"{path.parent.name}/{path.name[:2]}", []).append(path)
    return found


def hour_start(key: str) -> float | None:
    """The unix time an ``hourly_files`` key begins at (None: not a date)."""
    try:
        return calendar.timegm(time.strptime(key, "%Y-%m-%d/%H"))
    except ValueError:
        return None


def read_files(paths: list[Path]) -> Iterator[dict[str, Any]]:
    """Every whole record of ``paths``, in their order (a file removed
    meanwhile, by retention or compaction, is skipped)."""
    for path in paths:
        try:
            lines = path.open(encoding="utf-8")
        except FileNotFoundError:
            continue
        with lines:
            for line in lines:
                if not line.endswith("\n"):
                    break  # torn by a crash mid-write
                yield json.loads(line)


def read_unique(directory: Path, key: str) -> Iterator[dict[str, Any]]:
    """Every whole record below ``directory``, the first of each ``key``
    value (a log that may hold a record twice, such as a retried event)."""
    seen: set[object] = set()
    for record in read_records(directory):
        if record[key] not in seen:
            seen.add(record[key])
            yield record


def written_by(path: Path, writer: str) -> bool:
    """Whether ``path`` is one of ``writer``'s files (JsonlLog's names)."""
    name = path.stem[3:]  # after "<hour>-"
    return bool(writer) and (
        name == writer or re.fullmatch(re.escape(writer) + r"-\d+", name) is not None
    )


class JsonlTail:
    """Reads what was appended below ``directory`` since the last call, from
    every writer's files (a reader that follows the log, as the events
    API's duplicate check and the rollout's outcome guardrail do)."""

    def __init__(self, directory: Path, since: float = 0.0) -> None:
        self.directory = directory
        # Day folders before the one holding ``since`` are never read.
        self.first_day = time.strftime("%Y-%m-%d", time.gmtime(since)) if since else ""
        self.read_to: dict[Path, int] = {}  # how far each file was read

    def read_new(self, skip_writer: str = "") -> list[dict[str, Any]]:
        """``skip_writer``: not that writer's files (a process's own log,
        whose records it knows without reading them back)."""
        found: list[dict[str, Any]] = []
        paths = self._paths()
        for path in paths:
            if written_by(path, skip_writer):
                continue
            try:
                self._read(path, found)
            except FileNotFoundError:
                continue  # a day folder removed meanwhile (retention, compaction)
        # Files gone since (removed days) are forgotten, so this stays bounded.
        for gone in self.read_to.keys() - set(paths):
            del self.read_to[gone]
        return found

    def read_newest(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` whole records of every writer's files,
        oldest first, reading back from each file's end (a day of events
        can be gigabytes: a reader that starts needs only what it keeps);
        ``read_new`` goes on from here."""
        paths = self._paths()
        found: list[bytes] = []  # newest first
        for path in sorted(paths, key=modified, reverse=True):
            end = whole_lines_end(path)
            self.read_to[path] = end
            if len(found) < limit:
                found.extend(lines_before(path, end, limit - len(found)))
        return [json.loads(line) for line in reversed(found)]

    def _paths(self) -> list[Path]:
        paths = sorted(self.directory.rglob("*.jsonl")) if self.directory.exists() else []
        return [p for p in paths if p.parent.name >= self.first_day]

    def _read(self, path: Path, found: list[dict[str, Any]]) -> None:
        start = self.read_to.get(path, 0)
        if path.stat().st_size <= start:
            return
        with path.open("rb") as lines:
            lines.seek(start)
            for line in lines:
                if not line.endswith(b"\n"):
                    break  # being written: read it whole next time
                start += len(line)
                found.append(json.loads(line))
        self.read_to[path] = start


def modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


BLOCK = 1 << 20


def whole_lines_end(path: Path) -> int:
    """Where the last whole line of ``path`` ends (a line being written, or
    torn by a crash, is left for later); 0 for a file gone meanwhile."""
    try:
        with path.open("rb") as lines:
            end = lines.seek(0, os.SEEK_END)
            step = 1  # the usual case first: the last byte ends a line
            while end > 0:
                start = max(0, end - step)
                lines.seek(start)
                newline = lines.read(end - start).rfind(b"\n")
                if newline >= 0:
                    return start + newline + 1
                end, step = start, 1 << 16  # a line under way: back a few hundred lines
    except FileNotFoundError:
        pass
    return 0


def lines_before(path: Path, end: int, limit: int) -> list[bytes]:
    """Up to ``limit`` whole lines of ``path`` before ``end`` (a line's
    end), newest first."""
    found: list[bytes] = []
    try:
        with path.open("rb") as lines:
            rest = b""  # the start of a line the block before holds the rest of
            while end > 0 and len(found) < limit:
                start = max(0, end - BLOCK)
                lines.seek(start)
                parts = (lines.read(end - start) + rest).split(b"\n")
                rest = parts[0] if start else b""
                found.extend(line for line in reversed(parts[0 if not start else 1 :]) if line)
                end = start
    except FileNotFoundError:
        pass
    return found[:limit]
