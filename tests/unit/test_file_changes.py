"""recserve_kit.file_changes: a wait that the kernel ends when a file in a
watched folder is written, created, replaced or removed (inotify), and that
ends on its timeout where nothing changed."""

import asyncio
import os
import time

from recserve_kit.file_changes import FileChanges


async def test_a_write_ends_the_wait_long_before_its_timeout(tmp_path):
    changes = FileChanges([tmp_path])
    assert changes.notified  # Linux: the kernel reports changes
    try:
        for change in (
            lambda: (tmp_path / "feed.jsonl").write_text("one\n"),  # created
            lambda: (tmp_path / "feed.jsonl").open("a").write("two\n"),  # written
            lambda: os.replace(tmp_path / "feed.jsonl", tmp_path / "state.json"),  # moved in
        ):
            asyncio.get_running_loop().call_later(0.05, change)
            started = time.monotonic()
            await changes.wait(30)
            assert time.monotonic() - started < 20
    finally:
        changes.close()


async def test_without_a_change_the_wait_ends_on_its_timeout(tmp_path):
    changes = FileChanges([tmp_path])
    try:
        started = time.monotonic()
        await changes.wait(0.2)
        assert time.monotonic() - started >= 0.2
        (tmp_path / "other").mkdir()
        await asyncio.sleep(0.05)  # the kernel's notice is read meanwhile
        started = time.monotonic()
        await changes.wait(30)  # a change since the last wait ends the next at once
        assert time.monotonic() - started < 20
    finally:
        changes.close()
