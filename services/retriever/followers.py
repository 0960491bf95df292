"""Where each follower of a writer retriever stands, for the writer to see.

A follower (``follower.py``) writes ``<writer dir>/followers/<host>-<pid>.json``
as its generations change, and every ``HEARTBEAT_S`` besides: the
generations it serves and holds prepared. The writer reads them before it
calls a prepared model version READY: a rollout that starts moves users to
the candidate on every request-path process, so each must hold the
candidate's items by then (else its candidate users get the fallback
until its own build ends). A file not rewritten for ``STALE_S`` is a
follower that died: not waited for.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

HEARTBEAT_S = 5.0
STALE_S = 15.0


def folder(writer_dir: Path) -> Path:
    return writer_dir / "followers"


def own_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def write(writer_dir: Path, current: str, prepared: str) -> None:
    target = folder(writer_dir) / f"{own_name()}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps({"current": current, "prepared": prepared, "at": time.time()}))
    os.replace(tmp, target)


def remove(writer_dir: Path) -> None:
    (folder(writer_dir) / f"{own_name()}.json").unlink(missing_ok=True)


def lacking(writer_dir: Path, generation: str) -> list[str]:
    """The live followers that do not hold ``generation`` yet."""
    now, out = time.time(), []
    for path in sorted(folder(writer_dir).glob("*.json")):
        try:
            status = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # removed meanwhile
        if now - float(status["at"]) <= STALE_S and generation not in (
            status["current"],
            status["prepared"],
        ):
            out.append(path.stem)
    return out
