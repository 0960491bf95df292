"""The retriever's change feed (services/retriever/change_feed.py): every
applied write numbered in order, read back whole, exactly once, by a
follower; a torn tail cut off; a gap reported, never skipped over."""

import errno
import os

import numpy as np
import pytest

from services.retriever.change_feed import ChangeFeed, FeedGap, FeedReader, decode, encode
from services.retriever.generations import Write
from services.retriever.store import ItemRecord


def item(item_id: str, hot: int, dim: int = 8) -> ItemRecord:
    vector = np.zeros(dim, np.float32)
    vector[hot] = 0.5
    return ItemRecord(item_id, vector, ("Drama",), True, "A title", 1999, {"brand": "acme"})


def upsert(item_id: str) -> Write:
    current = [item(item_id, 1)]
    return Write("upsert", items=current, by_version={"v1": current, "v2": [item(item_id, 2)]})


def written(feed: ChangeFeed, *writes: Write) -> None:
    for write in writes:
        feed.append(feed.stamp(), write)


def test_a_write_decodes_to_what_was_applied_in_each_versions_space():
    back = decode(encode(7, upsert("p-1")))
    assert back.kind == "upsert" and back.items is back.by_version["v1"]
    for version, hot in (("v1", 1), ("v2", 2)):
        record = back.by_version[version][0]
        assert record.item_id == "p-1" and record.vector.dtype == np.float32
        assert int(np.argmax(record.vector)) == hot and record.vector[hot] == 0.5
        assert record.attributes == {"brand": "acme"} and record.categories == ("Drama",)
    # Items sent for no version named (the current's, elsewhere) travel whole.
    alone = Write("upsert", items=[item("p-2", 3)], by_version={"v9": [item("p-2", 4)]})
    assert int(np.argmax(decode(encode(8, alone)).items[0].vector)) == 3
    assert decode(encode(9, Write("soft", ids=["a", "b"]))).ids == ["a", "b"]


def test_a_follower_reads_each_write_once_in_order_and_a_half_written_line_later(tmp_path):
    feed = ChangeFeed(tmp_path / "feed")
    written(feed, upsert("a"), Write("soft", ids=["a"]))
    reader = FeedReader(tmp_path / "feed", after=0)
    assert [(seq, w.kind) for seq, w in reader.read_new()] == [(1, "upsert"), (2, "soft")]
    assert reader.read_new() == []
    (path,) = (tmp_path / "feed").iterdir()
    with path.open("a") as out:
        out.write('{"seq": 3, "at": 1.0, "kind": "hard", "ids"')  # being written
    assert reader.read_new() == []
    with path.open("a") as out:
        out.write(': ["a"]}\n')
    assert [(seq, w.ids) for seq, w in reader.read_new()] == [(3, ["a"])]
    # One that starts after a generation's start reads only what follows it.
    assert [seq for seq, _ in FeedReader(tmp_path / "feed", after=2).read_new()] == [3]


def test_a_restarted_writer_numbers_on_and_cuts_a_torn_tail(tmp_path):
    feed = ChangeFeed(tmp_path / "feed")
    written(feed, upsert("a"), upsert("b"))
    feed.close()
    (path,) = (tmp_path / "feed").iterdir()
    with path.open("a") as out:
        out.write('{"seq": 3, "kind": "so')  # a crash mid-line: never acknowledged
    again = ChangeFeed(tmp_path / "feed")
    assert again.last_seq == 2
    written(again, Write("hard", ids=["b"]))
    seqs = [seq for seq, _ in FeedReader(tmp_path / "feed", after=0).read_new()]
    assert seqs == [1, 2, 3]


def test_files_below_every_generations_start_go_and_a_reader_that_needed_them_is_told(tmp_path):
    feed = ChangeFeed(tmp_path / "feed", max_bytes=1)  # a file per write
    written(feed, *(upsert(f"i{n}") for n in range(5)))
    lagging = FeedReader(tmp_path / "feed", after=0)
    assert [seq for seq, _ in lagging.read_new()][:1] == [1]
    assert feed.trim(needed_after=3) == 3  # records 1-3 are in no generation's journal
    assert [seq for seq, _ in FeedReader(tmp_path / "feed", after=3).read_new()] == [4, 5]
    with pytest.raises(FeedGap):
        FeedReader(tmp_path / "feed", after=1).read_new()
    assert feed.trim(needed_after=99) == 1  # never the newest file
    assert [seq for seq, _ in FeedReader(tmp_path / "feed", after=4).read_new()] == [5]


def test_beside_a_qdrant_server_the_writes_are_numbered_but_not_kept(tmp_path):
    feed = ChangeFeed(tmp_path / "feed", kept=False)  # the server replicates itself
    written(feed, upsert("a"), Write("soft", ids=["a"]))
    assert feed.last_seq == 2 and not (tmp_path / "feed").exists()
    assert feed.trim(needed_after=2) == 0


def test_a_record_the_disk_refused_is_written_before_the_next_and_no_half_line_stays(
    tmp_path, monkeypatch
):
    feed = ChangeFeed(tmp_path / "feed")
    written(feed, upsert("a"))
    reader = FeedReader(tmp_path / "feed", after=0)
    assert [seq for seq, _ in reader.read_new()] == [1]
    real_fsync = os.fsync

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)  # the line is written, then refused
    with pytest.raises(OSError, match="No space"):
        written(feed, Write("soft", ids=["a"]))  # the index applied it: seq 2
    (path,) = (tmp_path / "feed").iterdir()
    assert path.read_bytes().endswith(b"\n") and path.read_bytes().count(b"\n") == 1
    assert reader.read_new() == [], "followers wait for seq 2; they see no gap"
    monkeypatch.setattr(os, "fsync", real_fsync)
    written(feed, upsert("b"))  # seq 3 goes after the 2 kept for it
    assert [(seq, w.kind) for seq, w in reader.read_new()] == [(2, "soft"), (3, "upsert")]
    assert feed.unwritten == []
