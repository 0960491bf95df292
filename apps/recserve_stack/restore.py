"""Restoring a backup (``recserve_stack.backup``) into a data dir whose
stack is stopped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer

from recserve_stack.backup import (
    DATA,
    FORMAT,
    MANIFEST,
    BackupError,
    console,
    settings_for,
)
from recserve_stack.backup_files import copy_file, file_list, stack_running


def read_manifest(source: Path) -> dict[str, Any]:
    path = source / MANIFEST
    if not path.exists():
        raise BackupError(f"{path} is missing: not a backup, or an incomplete one")
    manifest: dict[str, Any] = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{path}: format {manifest.get('format')}, this code reads {FORMAT}")
    return manifest


def check_files(source: Path, manifest: dict[str, Any]) -> None:
    """Every file the manifest lists, with its size and sha256."""
    found = file_list(source / DATA)
    for name, expected in manifest["files"].items():
        got = found.get(name)
        if got is None:
            raise BackupError(f"{source / DATA / name} is missing")
        if got != expected:
            raise BackupError(f"{source / DATA / name} differs from the manifest")


def restore(source: Path, data_dir: Path, force: bool = False) -> dict[str, Any]:
    """Puts the backup in ``source`` into ``data_dir``: absent or empty, or
    with ``force`` the paths the backup holds are replaced (the rest, such
    as logs/, stays). The caller checks that no stack runs there."""
    manifest = read_manifest(source)
    if data_dir.exists() and any(data_dir.iterdir()) and not force:
        raise BackupError(f"{data_dir} is not empty (--force replaces what the backup holds)")
    check_files(source, manifest)
    data_dir.mkdir(parents=True, exist_ok=True)
    for entry in sorted((source / DATA).iterdir()):
        existing = data_dir / entry.name
        if existing.is_symlink() or existing.is_file():
            existing.unlink()
        elif existing.is_dir():
            shutil.rmtree(existing)
        if entry.is_dir():
            shutil.copytree(entry, existing, copy_function=copy_file)
        else:
            copy_file(entry, existing)
    shutil.copystat(source / DATA, data_dir)
    return manifest


def restore_command(
    source: Annotated[Path, typer.Option("--from", help="A directory `backup` wrote.")],
    force: Annotated[
        bool, typer.Option(help="Replace what the backup holds in a data dir that is not empty.")
    ] = False,
    data_dir: Annotated[
        Path | None, typer.Option(help="Default: RECSERVE_STACK_DATA_DIR's.")
    ] = None,
) -> None:
    """Restore a backup into a data dir whose stack is stopped; `up` then
    serves the backed-up model version and lists."""
    settings = settings_for(data_dir)
    answering = stack_running(settings)
    if answering:
        console.print(
            f"[red]a stack is running on {settings.data_dir} (answering on "
            f"{', '.join(answering)} in {settings.socket_dir}): stop it first[/]"
        )
        raise typer.Exit(1)
    try:
        manifest = restore(source, settings.data_dir, force)
    except BackupError as failure:
        console.print(f"[red]restore failed: {failure}[/]")
        raise typer.Exit(1) from None
    console.print(
        f"restored {source} ({manifest['created_at']}, {len(manifest['files'])} files) into "
        f"{settings.data_dir}; CURRENT {manifest['current']}"
    )
