"""One rollout, several replicas of the service that runs it, one writer.

The replicas share the data directory (a volume on Kubernetes and Compose,
the disk locally). The replica that holds an exclusive lock on
``rollout/<name>.lock`` is the rollout's writer: it judges, saves the state
file and applies operator actions; it publishes the address they reach it
at in ``rollout/<name>.writer.json``. The others follow: they read the state
file when it changes (so each routes a user to the same arm: the arm is a
hash of the user id and the shared share), and publish the candidate's
figures they saw this step under ``rollout/<name>.replicas/``, which the
writer adds to its own before it judges. The kernel releases the lock when
its holder dies, so a follower takes over at its next look: one writer by
the lock, not by a count of replicas.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO, Any

from recserve_delivery.windows import VersionWindow

STALE_S = 30.0  # a follower's figures older than this are of a replica gone


def rollout_dir(data_dir: Path) -> Path:
    return data_dir / "rollout"


def replica_id() -> str:
    """This process, unique among the replicas on any host."""
    return f"{socket.gethostname()}-{os.getpid()}"


class WriterLock:
    """Who writes the rollout: ``try_acquire`` at each look; True while held."""

    def __init__(self, data_dir: Path, name: str = "ranker") -> None:
        self.directory = rollout_dir(data_dir)
        self.name = name
        self.address = ""  # where operator actions reach this replica, once serving
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def try_acquire(self) -> bool:
        if self._file is not None:
            return True
        self.directory.mkdir(parents=True, exist_ok=True)
        file = open(self.directory / f"{self.name}.lock", "a")  # noqa: SIM115 (held for life)
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            return False
        self._file = file
        self.publish()
        return True

    def publish(self) -> None:
        """The writer's address for operator actions (a follower forwards them)."""
        if self._file is None:
            return
        record = {"address": self.address, "replica": replica_id(), "since": time.time()}
        _write_json(self.directory / f"{self.name}.writer.json", record)

    def writer_address(self) -> str:
        """The writer's published address ("" when none is known yet)."""
        record = _read_json(self.directory / f"{self.name}.writer.json")
        return str(record.get("address", "")) if record else ""

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor releases the lock
            self._file = None


class ReplicaFigures:
    """A follower's candidate figures this step, and the writer's sum of them."""

    def __init__(self, data_dir: Path, name: str = "ranker", me: str = "") -> None:
        self.directory = rollout_dir(data_dir) / f"{name}.replicas"
        self.me = me or replica_id()

    def publish(self, step_started_at: float, windows: dict[str, VersionWindow]) -> None:
        record = {
            "step_started_at": step_started_at,
            "at": time.time(),
            "windows": {version: w.to_record() for version, w in windows.items()},
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        _write_json(self.directory / f"{self.me}.json", record)

    def others(self, step_started_at: float) -> dict[str, list[dict[str, Any]]]:
        """Each version's windows from the other replicas, this step's only."""
        found: dict[str, list[dict[str, Any]]] = {}
        if not self.directory.is_dir():
            return found
        now = time.time()
        for file in sorted(self.directory.glob("*.json")):
            if file.stem == self.me:
                continue
            record = _read_json(file)
            if not record or record.get("step_started_at") != step_started_at:
                continue
            if now - float(record.get("at", 0)) > STALE_S:
                continue
            for version, window in record.get("windows", {}).items():
                found.setdefault(version, []).append(window)
        return found

    def withdraw(self) -> None:
        """This replica's file away (it became the writer, or stops)."""
        with contextlib.suppress(FileNotFoundError):
            (self.directory / f"{self.me}.json").unlink()


def _write_json(file: Path, record: dict[str, Any]) -> None:
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, file)


def _read_json(file: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None
