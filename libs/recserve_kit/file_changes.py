"""Waiting for files in a few folders to change, without polling them.

On Linux the kernel says when a file below a watched folder is written,
created, moved in or removed (inotify); ``wait`` returns then, or after its
timeout either way. Elsewhere (or where inotify cannot be had: a limit on
watches reached) ``wait`` is only the timeout, so a caller that looks at
its files after each ``wait`` works everywhere and is woken at once where
the kernel can do it. Python's standard library has no inotify binding,
and the libraries that wrap it for asyncio poll on a timer of their own
(watchfiles' ``step``) or run a thread; this is the system call itself on
the event loop's own selector.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger(__name__)
# <sys/inotify.h>
IN_MODIFY, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x2, 0x80, 0x100, 0x200
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, 0o2000000
WATCHED = IN_MODIFY | IN_MOVED_TO | IN_CREATE | IN_DELETE


class FileChanges:
    def __init__(self, folders: list[Path]) -> None:
        self.changed = asyncio.Event()
        self.fd = -1
        if sys.platform != "linux":
            return
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            log.warning(
                "no inotify (%s): looking at the files on a timer", os.strerror(ctypes.get_errno())
            )
            return
        for folder in folders:
            if libc.inotify_add_watch(fd, os.fsencode(folder), WATCHED) < 0:
                log.warning("cannot watch %s (%s): looking at it on a timer", folder,
                            os.strerror(ctypes.get_errno()))  # fmt: skip
        self.fd = fd
        asyncio.get_running_loop().add_reader(fd, self._read)

    @property
    def notified(self) -> bool:
        """Whether the kernel says when files change (else only the timeout)."""
        return self.fd >= 0

    def _read(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 1 << 16):
                pass  # the events themselves say nothing a look would not
        self.changed.set()

    async def wait(self, timeout_s: float) -> None:
        """Until something changed since the last ``wait``, or ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), timeout_s)
        self.changed.clear()

    def close(self) -> None:
        if self.fd >= 0:
            asyncio.get_running_loop().remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
