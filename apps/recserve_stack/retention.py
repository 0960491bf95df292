"""The local stack's own files, kept bounded.

- each component's log (``<data_dir>/logs/<name>.log``): rotated by size as
  the runner writes it (``runner.rotating_log``);
- Envoy's access log (one line a request): renamed ``.1`` past the same size,
  then Envoy's admin ``/reopen_logs`` makes it write a new file (here);
- impressions: by day, by the gateways (``impressions_keep_days``);
- traces: by size, by each service's exporter (``recserve_kit.telemetry``).

App events and the catalogue's changes are not pruned: they are what the
next build learns from (the living dataset, ``pipelines snapshot``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import urllib.request
from pathlib import Path

from recserve_stack.envoy import ENVOY_ACCESS_LOG
from recserve_stack.settings import StackSettings

log = logging.getLogger(__name__)
CHECK_EVERY_S = 60.0


def rotate_access_log(path: Path, max_bytes: int, admin_url: str) -> bool:
    """``path`` renamed ``<name>.1`` when past ``max_bytes`` (the one before
    is replaced) and Envoy told to open a new one; True if it was."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size <= max_bytes:
        return False
    os.replace(path, path.with_name(path.name + ".1"))
    request = urllib.request.Request(f"{admin_url}/reopen_logs", method="POST")
    with urllib.request.urlopen(request, timeout=5) as answer:
        answer.read()
    return True


async def keep_access_log_bounded(settings: StackSettings) -> None:
    """Runs beside the stack: checks the access log's size once a minute."""
    path = settings.data_dir / "logs" / ENVOY_ACCESS_LOG
    admin = f"http://{settings.host}:{settings.envoy_admin_port}"
    while True:
        await asyncio.sleep(CHECK_EVERY_S)
        try:
            await asyncio.to_thread(rotate_access_log, path, settings.log_max_bytes, admin)
        except OSError as exc:  # Envoy restarting: the next look tries again
            log.warning("cannot rotate %s: %s", path, exc)
