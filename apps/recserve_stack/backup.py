"""`recserve-stack backup --out DIR` and `recserve-stack restore --from DIR`:
a data dir's state, copied from a running or a stopped stack, and put back
into a data dir whose stack is stopped.

What a backup holds (``DIR/data/`` mirrors the data dir; ``DIR/manifest.json``
says what, with each file's size and sha256, and is written last: a backup
without it is incomplete and ``restore`` refuses it):

- the event logs (``events/app``, ``events/impressions``,
  ``events/catalogue``): append-only JSON Lines, each file copied up to the
  length it had when its log was listed, cut after its last whole line. Every
  event acknowledged before the backup began is in it (the gateway answers
  only after the line is fsynced); a line being written is never copied torn.
- the artifacts the stack serves or may switch to (``CURRENT`` and the
  rollout's stable and candidates, and those the retriever's index names),
  checked against their manifests; ``CURRENT``; the rollout state
  (``rollout/*.json``); the Triton repository generated from them.
- the retriever's Qdrant Edge shards (the current generation and a prepared
  one) and their ``state.json``. Qdrant Edge has no call that makes a
  snapshot (its snapshot functions restore one a Qdrant server made), so the
  shard directories are copied and the copy is loaded to check it opens and
  how many points it holds. A shard changes only by a catalogue write (each
  recorded in ``events/catalogue`` once the index took it) or a switch of
  generation (``state.json``); if either happened during the copy it is
  made again. The catalogue log is copied up to where it stood then.
- Feast: the registry, the published marker and the SQLite online store,
  through SQLite's own backup (a consistent copy while the features service
  writes). It is copied before the event logs are listed, and the gateway
  pushes an event to the features only after it is in the log: the online
  store holds no event the copied log lacks (it may lack the last few).
  The online features are not rebuilt from events at start (only the
  artifact's are), so they are copied, not derived.
- the live re-scoring run (``rescoring/PUBLISHED.json`` and its run), the
  dataset export under ``raw/`` if the data dir holds one, the data dir's
  own dataset (``dataset/``), the bases older events were folded into
  (``bases/``) and the snapshots the kept artifacts were built from (the
  next build starts from the current one's).
- secrets, unless ``--no-secrets``: ``auth/`` (the admin and app keys and
  tokens), ``tls/`` (the stack's CA and certificates) and ``edge/``, with
  their file modes, so that a restored stack accepts the same tokens and
  its clients trust the same CA.

Left out: ``logs/``, ``traces/``, ``sockets/``, ``envoy/`` (written at
start), ``triton/backends`` (links into the Triton wheel), older
snapshots (no kept artifact was built from them), re-scoring runs that are
not live. A Redis online store
(RECSERVE_FEATURES_REDIS_URL) is not copied: back Redis up with its own
RDB snapshot.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from recserve_cli import console as cli_console
from recserve_delivery import state as rollout_state
from recserve_kit.config import load_settings
from recserve_model import artifacts, published
from recserve_stack.backup_files import (
    code_version,
    copy_file,
    copy_log,
    file_list,
    log_lengths,
    sqlite_copy,
    stack_running,
    transient,
    transient_name,
)
from recserve_stack.settings import StackSettings

FORMAT = 1
MANIFEST = "manifest.json"
DATA = "data"
LOGS = ("app", "impressions", "catalogue")  # under events/
SECRETS = ("auth", "tls", "edge")
ATTEMPTS = 5
console = cli_console(stderr=True)


class BackupError(RuntimeError):
    pass


# -- the parts ---------------------------------------------------------------------


@dataclass
class Backup:
    data_dir: Path
    out: Path
    secrets: bool = True
    notes: list[str] = field(default_factory=list)
    parts: dict[str, Any] = field(default_factory=dict)

    @property
    def target(self) -> Path:
        return self.out / DATA

    def copy_tree(self, relative: str, required: bool = False) -> bool:
        """A directory (symlinks followed) or a file, modes kept."""
        source = self.data_dir / relative
        if not source.exists():
            if required:
                raise BackupError(f"{source} is missing")
            return False
        target = self.target / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=transient, copy_function=copy_file)
        else:
            copy_file(source, target)
        return True

    def current(self) -> str:
        pointer = artifacts.artifacts_root(self.data_dir) / "CURRENT"
        if not pointer.exists():
            raise BackupError(f"{pointer} is missing: nothing was built into this data dir")
        return pointer.read_text().strip()

    # Feast: before the event logs are listed (see the module's doc).
    def feast(self) -> None:
        feast_dir = self.data_dir / "feast"
        if not feast_dir.is_dir():
            self.notes.append("no feast/: the features service publishes the artifact at start")
            return
        if os.environ.get("RECSERVE_FEATURES_REDIS_URL"):
            self.notes.append("the online store is Redis: not copied (use Redis's RDB snapshot)")
        for _ in range(ATTEMPTS):
            markers = _markers(feast_dir)
            target = self.target / "feast"
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for path in sorted(feast_dir.iterdir()):
                if path.name == "online.db":
                    sqlite_copy(path, target / path.name)
                elif path.is_file() and not transient_name(path.name):
                    shutil.copy2(path, target / path.name)
                elif path.is_dir():
                    shutil.copytree(path, target / path.name, ignore=transient)
            if _markers(feast_dir) == markers:  # no publish meanwhile
                self.parts["feast"] = {"published": markers}
                return
        raise BackupError("the features kept publishing a new artifact during the copy")

    def qdrant(self) -> None:
        """The shards of every collection, consistent with the catalogue log."""
        root = self.data_dir / "qdrant"
        catalogue = self.data_dir / "events" / "catalogue"
        collections = (
            sorted(p for p in root.iterdir() if (p / "state.json").exists())
            if (root.is_dir())
            else []
        )
        if not collections:
            self.notes.append("no Qdrant index: the retriever builds it from the artifact at start")
            self.logs_catalogue(log_lengths(catalogue))
            return
        for attempt in range(1, ATTEMPTS + 1):
            before = log_lengths(catalogue)
            states = {c: (c / "state.json").read_text() for c in collections}
            shutil.rmtree(self.target / "qdrant", ignore_errors=True)
            found = {c.name: self._collection(c, states[c]) for c in collections}
            unchanged = log_lengths(catalogue) == before and all(
                (c / "state.json").read_text() == states[c] for c in collections
            )
            if unchanged:
                self.parts["qdrant"] = {"collections": found, "attempts": attempt}
                self.logs_catalogue(before)
                return
        raise BackupError(
            f"the retriever's index kept changing during {ATTEMPTS} copies "
            "(catalogue writes or a new generation); run the backup again"
        )

    def logs_catalogue(self, lengths: dict[Path, int]) -> None:
        events = self.data_dir / "events"
        summary = self.parts.setdefault("events", {})
        summary["catalogue"] = copy_log(lengths, events, self.target / "events")

    def _collection(self, directory: Path, recorded: str) -> dict[str, Any]:
        import qdrant_edge as qe

        target = self.target / "qdrant" / directory.name
        target.mkdir(parents=True)
        (target / "state.json").write_text(recorded)
        state = json.loads(recorded)
        generations = [state.get("generation")]
        prepared = state.get("prepared")
        if isinstance(prepared, dict):
            generations.append(prepared.get("generation"))
        points = {}
        for generation in [str(g) for g in generations if g]:
            if not (directory / generation).is_dir():  # a Qdrant server's collection
                note = f"{directory.name}/{generation} is not a shard here: not copied"
                self.notes.extend([note] if note not in self.notes else [])
                continue
            shutil.copytree(directory / generation, target / generation, copy_function=copy_file)
            # A copy that loads is a shard; its count is what the restore serves.
            shard = qe.EdgeShard.load(str(target / generation))
            try:
                points[generation] = int(shard.info().points_count)
            finally:
                shard.close()
        return {
            "generation": state.get("generation"),
            "artifact_version": state.get("artifact_version"),
            "points": points,
        }

    def index_versions(self) -> set[str]:
        """The artifact versions the retriever's generations were built from."""
        versions: set[str] = set()
        for state_path in (self.target / "qdrant").glob("*/state.json"):
            state = json.loads(state_path.read_text())
            versions.add(str(state.get("artifact_version", "")))
            prepared = state.get("prepared")
            if isinstance(prepared, dict):
                versions.add(str(prepared.get("artifact_version", "")))
        return {v for v in versions if v}

    def model(self, current: str) -> None:
        """The artifacts in use, CURRENT, the rollout state, the Triton repository."""
        rollout_dir = self.data_dir / "rollout"
        if rollout_dir.is_dir():
            target = self.target / "rollout"
            target.mkdir(parents=True)
            for path in sorted(rollout_dir.glob("*.json")):
                if not path.name.endswith(".writer.json"):  # a live process's address
                    shutil.copy2(path, target / path.name)
        root = artifacts.artifacts_root(self.data_dir)
        wanted = {current} | rollout_state.protected_versions(self.data_dir) | self.index_versions()
        copied = []
        for version in sorted(wanted):
            if not (root / version).is_dir():
                self.notes.append(f"artifact {version} is named but not in the data dir")
                continue
            target = self.target / "artifacts" / version
            shutil.copytree(root / version, target)
            artifacts.verify(target)  # a whole, untampered copy
            copied.append(version)
        (self.target / "artifacts" / "CURRENT").write_text(current)
        self.copy_tree("triton/repository")
        self.parts["model"] = {"current": current, "artifacts": copied}
        self.parts["datasets"] = self.datasets(root, copied)

    def datasets(self, root: Path, versions: list[str]) -> list[str]:
        """The data dir's own dataset, its bases and the ones the kept
        artifacts were built from (a retrain's snapshot): the next build
        starts from the current artifact's dataset, so a restore without it
        could not build."""
        named = {"dataset"} if (self.data_dir / "dataset" / "dataset.yaml").is_file() else set()
        bases = self.data_dir / "bases"  # events folded by compaction (pipelines/compact.py)
        for base in sorted(bases.iterdir()) if bases.is_dir() else ():
            if base.is_dir() and not base.name.startswith("."):
                named.add(f"bases/{base.name}")
        for version in versions:
            manifest = json.loads((root / version / "manifest.json").read_text())
            built_from = Path(manifest.get("dataset_dir") or "")
            if not built_from.is_absolute():
                continue  # the demo's, made again from raw/
            if built_from.resolve().is_relative_to(self.data_dir.resolve()):
                named.add(str(built_from.resolve().relative_to(self.data_dir.resolve())))
            elif built_from.is_dir():
                self.notes.append(f"{version} was built from {built_from}, outside: keep it")
        return sorted(name for name in named if self.copy_tree(name))

    def rescoring(self) -> None:
        live = published.live_run(self.data_dir)
        if live is None:
            return
        self.copy_tree("rescoring/PUBLISHED.json")
        self.copy_tree(f"rescoring/runs/{live['run_id']}")
        self.parts["rescoring"] = {"run_id": live["run_id"]}

    def rest(self) -> None:
        if self.copy_tree("raw"):
            self.parts["raw"] = True
        if self.secrets:
            self.parts["secrets"] = [name for name in SECRETS if self.copy_tree(name)]
        else:
            self.notes.append("secrets left out: a restored stack makes new keys and tokens")


def _markers(feast_dir: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(feast_dir.glob("published-*.json"))}


def backup(
    data_dir: Path, out: Path, secrets: bool = True, running: bool = False
) -> dict[str, Any]:
    """Writes the backup into ``out`` (absent or empty); its manifest."""
    if out.exists() and any(out.iterdir()):
        raise BackupError(f"{out} is not empty")
    if out.resolve().is_relative_to(data_dir.resolve()):
        raise BackupError(f"{out} is inside the data dir {data_dir}")
    started = time.time()
    job = Backup(data_dir, out, secrets)
    current = job.current()
    job.target.mkdir(parents=True)
    out.chmod(0o700)  # it holds the keys and tokens, and users' events
    job.feast()
    # The backup point of the app and impression logs (the catalogue's is
    # where it stood when the index was copied).
    lengths = {name: log_lengths(data_dir / "events" / name) for name in ("app", "impressions")}
    began = time.time()
    events = job.parts.setdefault("events", {})
    for name, listed in lengths.items():
        events[name] = copy_log(listed, data_dir / "events", job.target / "events")
    job.qdrant()
    job.model(current)
    job.rescoring()
    job.rest()
    if job.current() != current:
        raise BackupError(f"CURRENT changed from {current} during the backup; run it again")
    files = file_list(job.target)
    manifest = {
        "format": FORMAT,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "logs_listed_at": round(began, 3),
        "took_s": round(time.time() - started, 2),
        "code_version": code_version(),
        "data_dir": str(data_dir),
        "stack_running": running,
        "current": current,
        **job.parts,
        "notes": job.notes,
        "bytes": sum(f["bytes"] for f in files.values()),
        "disk_bytes": sum(p.stat().st_blocks * 512 for p in job.target.rglob("*") if p.is_file()),
        "files": files,
    }
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2))
    os.replace(tmp, out / MANIFEST)  # last: a backup with a manifest is whole
    return manifest


# -- the commands ----------------------------------------------------------------


def settings_for(data_dir: Path | None) -> StackSettings:
    settings = load_settings(StackSettings)
    if data_dir is not None:
        settings = settings.model_copy(update={"data_dir": data_dir})
    return settings


def backup_command(
    out: Annotated[Path, typer.Option("--out", help="An absent or empty directory.")],
    secrets: Annotated[
        bool,
        typer.Option(
            "--secrets/--no-secrets",
            help="Copy auth/, tls/ and edge/ (keys, tokens, the CA), modes kept: on by "
            "default, so the restored stack takes the same app tokens. Keep the backup "
            "as safe as the data dir.",
        ),
    ] = True,
    data_dir: Annotated[
        Path | None, typer.Option(help="Default: RECSERVE_STACK_DATA_DIR's.")
    ] = None,
) -> None:
    """Back up a data dir, its stack running or not: the event logs up to
    now, the artifacts in use, rollout state, Feast's registry and online
    store, the retriever's Qdrant Edge shards, and secrets (see --no-secrets)."""
    settings = settings_for(data_dir)
    running = bool(stack_running(settings))
    try:
        manifest = backup(settings.data_dir, out, secrets, running)
    except (BackupError, artifacts.ArtifactError) as failure:
        console.print(f"[red]backup failed: {failure}[/]")
        raise typer.Exit(1) from None
    events = manifest["events"]
    console.print(
        f"backed up {settings.data_dir} ({'running' if running else 'stopped'}) into {out}: "
        f"{manifest['bytes'] / 1e6:.1f} MB ({manifest['disk_bytes'] / 1e6:.1f} MB on disk) "
        f"in {len(manifest['files'])} files, "
        f"{manifest['took_s']:.1f} s; CURRENT {manifest['current']}; events: "
        + ", ".join(f"{name} {events[name]['events']}" for name in LOGS if name in events)
    )
    for note in manifest["notes"]:
        console.print(f"note: {note}")
