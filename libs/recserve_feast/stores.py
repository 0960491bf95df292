"""Online-store addresses as Feast takes them."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

REDIS_ADDRESS = re.compile(r"[A-Za-z0-9._-]+:\d{1,5}(,[a-z_]+=[^,]*)*")


def redis_connection(url: str) -> str:
    """Feast's Redis connection string (``host:port[,db=N,...]``) from that
    form or a ``redis://host:port[/db]`` URL; ValueError for anything else
    (a URL passed straight to Feast crashes it at first use)."""
    if url.startswith("redis://"):
        parts = urlsplit(url)
        if not parts.hostname or not parts.port:
            raise ValueError(f"{url!r}: a Redis URL needs a host and a port")
        db = parts.path.strip("/")
        if db and not db.isdigit():
            raise ValueError(f"{url!r}: the database must be a number, got {db!r}")
        return f"{parts.hostname}:{parts.port}" + (f",db={db}" if db else "")
    if not REDIS_ADDRESS.fullmatch(url):
        raise ValueError(f"{url!r}: expected host:port[,db=N] or redis://host:port[/db]")
    return url
