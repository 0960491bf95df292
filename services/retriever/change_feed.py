"""The retriever's change feed: every write its index applied, in the order
it applied them, numbered, for a follower to replay.

A second request-path process (one per core) cannot open the writer's Qdrant
Edge shard: each shard locks its WAL while open, and Edge has no read-only
mode, snapshot-making or log shipping in Python (docs/design.md). So the
follower keeps shards of its own: each generation built from the same
artifact, then the writes since that generation's journal began replayed
from here (``follower.py``), as Qdrant's own replicas apply the same
operations rather than copy index files.

The writer numbers each write under its write lock (``stamp``: the order
the index applied them) and appends it, fsynced, before the call returns
(``append``), with an upsert's vectors in every served version's space, so
a follower never embeds. Files ``<first seq>.jsonl`` below the feed's
folder; a new one past ``max_bytes``; whole files below every generation's
start go (``trim``). Upserts, soft and hard deletes by id are idempotent,
so replaying one twice is harmless; a gap is not, and readers report it.
So a record the disk refused (full, failing) is never skipped: the index
applied it, so it is kept and written before the next one, a half-written
line cut off first (``append``); until then followers wait, and see no gap.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import itertools
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recserve_kit.jsonl_log import JsonlTail, lines_before, whole_lines_end
from services.retriever.generations import Write
from services.retriever.store import ItemRecord

SUFFIX = ".jsonl"


class FeedGap(Exception):
    """Records a reader needs are gone (trimmed), or a file is torn."""


def encode_items(items: Sequence[ItemRecord]) -> list[dict[str, Any]]:
    return [
        {
            "item_id": item.item_id,
            "vector": base64.b64encode(np.asarray(item.vector, "<f4").tobytes()).decode(),
            "categories": list(item.categories),
            "active": item.active,
            "title": item.title,
            "year": item.year,
            "attributes": item.attributes,
        }
        for item in items
    ]


def decode_items(raw: Sequence[dict[str, Any]]) -> list[ItemRecord]:
    return [
        ItemRecord(
            item_id=r["item_id"],
            vector=np.frombuffer(base64.b64decode(r["vector"]), "<f4").copy(),
            categories=tuple(r["categories"]),
            active=bool(r["active"]),
            title=r["title"],
            year=int(r["year"]),
            attributes=dict(r["attributes"]),
        )
        for r in raw
    ]


def encode(seq: int, write: Write) -> dict[str, Any]:
    record: dict[str, Any] = {"seq": seq, "at": round(time.time(), 3), "kind": write.kind}
    if write.kind != "upsert":
        record["ids"] = list(write.ids)
        return record
    versions = {v: encode_items(items) for v, items in write.by_version.items()}
    # ``items``, what a generation of a version not named gets, is one of
    # them (the current version's) or, where none is, its own.
    own = next((v for v, items in write.by_version.items() if items is write.items), None)
    record["by_version"] = versions
    record["items"] = own if own is not None else encode_items(write.items)
    return record


def decode(record: dict[str, Any]) -> Write:
    kind = record["kind"]
    if kind != "upsert":
        return Write(kind, ids=list(record["ids"]))
    by_version: dict[str, Sequence[ItemRecord]] = {
        v: decode_items(raw) for v, raw in record["by_version"].items()
    }
    own = record["items"]
    items = by_version[own] if isinstance(own, str) else decode_items(own)
    return Write("upsert", items=items, by_version=by_version)


def segments(directory: Path) -> list[tuple[int, Path]]:
    """The feed's files by the seq of their first record, oldest first."""
    if not directory.is_dir():
        return []
    found = [(int(p.stem), p) for p in directory.glob(f"*{SUFFIX}") if p.stem.isdigit()]
    return sorted(found)


class ChangeFeed:
    """The writer's end: one per retriever, under its write lock."""

    def __init__(self, directory: Path, max_bytes: int = 16 << 20, kept: bool = True) -> None:
        """``kept``: written to disk (a Qdrant server replicates itself:
        there the writes are only numbered, for the journals)."""
        self.directory = directory
        self.max_bytes = max_bytes
        self.kept = kept
        if kept:
            directory.mkdir(parents=True, exist_ok=True)
        self.last_seq = self._recover() if kept else 0
        self._file: Any = None
        # Applied by the index but not yet on disk (a failed append), in order.
        self.unwritten: list[dict[str, Any]] = []

    def _recover(self) -> int:
        """The last whole record's seq; a torn last line (a crash while it
        was written, never acknowledged) is cut off so the next appends
        after it."""
        found = segments(self.directory)
        if not found:
            return 0
        first, newest = found[-1]
        end = whole_lines_end(newest)
        if end < newest.stat().st_size:
            os.truncate(newest, end)
        last = lines_before(newest, end, 1)
        return int(json.loads(last[0])["seq"]) if last else first - 1

    def stamp(self) -> int:
        """The next seq: taken where the index applied the write."""
        self.last_seq += 1
        return self.last_seq

    def append(self, seq: int, write: Write) -> None:
        """Written and fsynced when it returns (blocking: a worker thread),
        after any record a failed append left unwritten. If the disk fails,
        it raises and keeps the records it could not write, for the next
        append: a follower waits for them instead of finding a gap."""
        if not self.kept:
            return
        self.unwritten.append(encode(seq, write))
        while self.unwritten:
            self._write(self.unwritten[0])
            self.unwritten.pop(0)

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is None or self._file.tell() >= self.max_bytes:
            if self._file is not None:
                self._file.close()
            found = segments(self.directory)
            path = found[-1][1] if found else None
            if path is None or path.stat().st_size >= self.max_bytes:
                path = self.directory / f"{record['seq']:012d}{SUFFIX}"
            # Unbuffered: a failed write leaves nothing behind to flush later.
            self._file = path.open("ab", buffering=0)
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        start = self._file.tell()
        try:
            if self._file.write(line) != len(line):
                raise OSError(errno.ENOSPC, "short write to the change feed")
            os.fsync(self._file.fileno())
        except OSError:
            # Half a line may have reached the file: cut back to where this
            # record began, and reopen next time.
            failed, self._file = self._file, None
            failed.close()
            with contextlib.suppress(OSError):
                os.truncate(failed.name, start)
            raise

    def trim(self, needed_after: int) -> int:
        """Removes the files whose records are all at or below
        ``needed_after`` (the oldest generation's start); never the newest."""
        found = segments(self.directory) if self.kept else []
        gone = 0
        for (_, path), (next_first, _) in itertools.pairwise(found):
            if next_first - 1 <= needed_after:
                path.unlink(missing_ok=True)
                gone += 1
        return gone

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class FeedReader:
    """A follower's end: the records after a seq, then each new one once
    (the kit's tail of a log's files, which leaves a half-written line for
    the next call; the files sort in seq order by their names)."""

    def __init__(self, directory: Path, after: int) -> None:
        self.directory = directory
        self.tail = JsonlTail(directory)
        self.applied = after  # the last seq handed out
        self.appended_at = 0.0  # when the writer appended it

    def check(self) -> None:
        """``FeedGap`` if the feed no longer has the records after ``after``."""
        found = segments(self.directory)
        if found and found[0][0] > self.applied + 1:
            raise FeedGap(f"the feed starts at seq {found[0][0]}, after {self.applied + 1}")

    def read_new(self) -> list[tuple[int, Write]]:
        """The whole records written since the last call, in seq order;
        ``FeedGap`` where one the reader needs has gone."""
        out: list[tuple[int, Write]] = []
        for record in self.tail.read_new():
            seq = int(record["seq"])
            if seq <= self.applied:
                continue
            if seq != self.applied + 1:
                raise FeedGap(f"seq {seq} follows {self.applied}")
            self.applied, self.appended_at = seq, float(record["at"])
            out.append((seq, decode(record)))
        return out
