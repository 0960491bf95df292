"""Validate a dataset directory completely, and load it as typed frames only
when nothing fails.

``inspect`` runs every check it can and returns the report with the typed
tables; ``validate`` returns the report; ``load`` returns the tables or
raises ``InvalidDataset`` with the report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from recserve_data import checks
from recserve_data.checks import Needs
from recserve_data.columns import (
    Cells,
    coerce,
    to_boolean,
    to_ids,
    to_strings,
    to_tags,
    to_timestamp,
)
from recserve_data.manifest import ID, MANIFEST, REQUIRED, Manifest, ManifestError, read_manifest
from recserve_data.report import CHECKS, InvalidDataset, Report, Status
from recserve_data.tables import TableError, fingerprint, read_table


@dataclass
class Dataset:
    """A valid dataset's tables, typed: ids and text as str, categories and
    tags as lists of str, numeric as float64 (Int64 when whole numbers),
    boolean as bool or boolean, timestamps as whole seconds (int64)."""

    directory: Path
    manifest: Manifest
    items: pd.DataFrame
    interactions: pd.DataFrame
    users: pd.DataFrame | None
    fingerprint: str


def _manifest(directory: Path, report: Report) -> Manifest | None:
    try:
        return read_manifest(directory)
    except ManifestError as refused:
        for key, value, message in refused.problems:
            shown = [] if value is None or isinstance(value, dict) else [value]
            report.add("manifest", Status.FAIL, MANIFEST, key or None, message, None, shown, 1)
    for check in list(CHECKS)[1:]:
        report.skip(check, "the manifest is invalid")
    return None


def _read(directory: Path, manifest: Manifest, report: Report) -> dict[str, pd.DataFrame]:
    raw: dict[str, pd.DataFrame] = {}
    for kind, table in manifest.tables().items():
        try:
            frame = read_table(directory, table, manifest.csv)
        except TableError as refused:
            report.add("files", Status.FAIL, table.file, None, str(refused), None, [])
            continue
        if frame.empty:
            report.add("files", Status.FAIL, table.file, None, "has no rows", None, [])
            continue
        raw[kind] = frame
    return raw


def _columns(kind: str, frame: pd.DataFrame, manifest: Manifest, report: Report) -> None:
    """Required and declared columns present, none undeclared; a column's
    problem is shown with the header (or the column's name) as the value."""
    table = manifest.tables()[kind]
    header = ", ".join(map(str, frame.columns))
    missing = "required column is missing (the value shown is the header)"
    found = [(n, missing, header) for n in REQUIRED[kind] if n not in frame]
    absent = "declared in dataset.yaml but missing from the file"
    found += [(n, absent, header) for n in table.columns if n not in frame]
    undeclared = "is not declared in dataset.yaml: declare it with a type, or drop it"
    found += [
        (str(n), undeclared, str(n))
        for n in frame.columns
        if n not in REQUIRED[kind] and n not in table.columns
    ]
    for name, problem, shown in found:
        report.add("columns", Status.FAIL, table.file, name, problem, None, [shown], count=1)


def _required(
    kind: str, name: str, series: pd.Series, cells: Cells, sep: str, now: float
) -> pd.Series:
    if REQUIRED[kind][name] == ID:
        return to_ids(series, cells)
    if name == "categories":
        return to_tags(series, cells, None, sep)
    if name == "active":
        return to_boolean(series, cells, nullable=False).fillna(False).astype(bool)
    if name == "timestamp":
        return to_timestamp(series, cells, nullable=False, now=now).fillna(-1).astype("int64")
    return to_strings(series, cells, nullable=False, kind=REQUIRED[kind][name])


def _typed(
    kind: str, frame: pd.DataFrame, manifest: Manifest, report: Report, now: float
) -> pd.DataFrame:
    table = manifest.tables()[kind]
    sep = manifest.csv.list_separator
    out: dict[str, pd.Series] = {}
    for name in REQUIRED[kind]:
        if name in frame:
            out[name] = _required(
                kind, name, frame[name], Cells(report, table.file, name), sep, now
            )
    for name, spec in table.columns.items():
        if name in frame:
            out[name] = coerce(frame[name], Cells(report, table.file, name), spec, sep, now)
    return pd.DataFrame(out, index=frame.index)


def _cross(
    manifest: Manifest,
    raw: dict[str, pd.DataFrame],
    typed: dict[str, pd.DataFrame],
    report: Report,
    needs: Needs,
) -> None:
    """The checks across rows and tables, on the typed columns."""
    items, events, users = typed.get("items"), typed.get("interactions"), typed.get("users")
    spec = manifest.tables()
    for kind, frame, key in (("items", items, "item_id"), ("users", users, "user_id")):
        if frame is not None and key in frame:
            checks.duplicates(report, spec[kind].file, frame[key], key)
    if events is None:
        for check in ("references", "event types", "coverage", "split"):
            report.skip(check, "the interactions table could not be read")
        return
    file = manifest.interactions.file
    checks.repeated_interactions(report, file, events)
    if "event_type" in events:
        checks.event_types(report, manifest, events)
        checks.event_values(report, manifest, events, raw["interactions"])
    for kind, frame, key in (("items", items, "item_id"), ("users", users, "user_id")):
        if frame is not None and key in frame and key in events:
            checks.references(report, file, events[key], frame[key], key, spec[kind].file)
            checks.coverage(report, spec[kind].file, frame[key], events[key], kind[:-1])
    if "user_id" in events:
        roles = {n: e.role.value for n, e in manifest.interactions.event_types.items()}
        checks.split(report, file, events, roles, needs)


def inspect(
    directory: Path, needs: Needs | None = None, now: float | None = None
) -> tuple[Report, Dataset | None]:
    """Every check; the typed tables when none fails."""
    needs = needs or Needs()
    now = time.time() if now is None else now
    report = Report(directory)
    manifest = _manifest(directory, report)
    if manifest is None:
        return report, None
    raw = _read(directory, manifest, report)
    for kind, frame in raw.items():
        _columns(kind, frame, manifest, report)
    typed = {kind: _typed(kind, frame, manifest, report, now) for kind, frame in raw.items()}
    _cross(manifest, raw, typed, report, needs)
    if "items" in typed and "interactions" in typed:
        counts = (
            int(typed["interactions"].get("user_id", pd.Series(dtype=object)).nunique()),
            len(typed["items"]),
            len(typed["interactions"]),
        )
        report.facts.update(users=counts[0], items=counts[1], interactions=counts[2])
        checks.memory(report, str(directory), list(typed.values()), counts, needs)
    else:
        report.skip("memory", "the items or interactions table could not be read")
    if report.failed:
        return report, None
    dataset = Dataset(
        directory,
        manifest,
        typed["items"],
        typed["interactions"],
        typed.get("users"),
        fingerprint(directory, manifest),
    )
    return report, dataset


def validate(directory: Path, needs: Needs | None = None, now: float | None = None) -> Report:
    return inspect(directory, needs, now)[0]


def load(directory: Path, needs: Needs | None = None) -> Dataset:
    """The typed tables of a valid dataset; ``InvalidDataset`` otherwise."""
    report, dataset = inspect(directory, needs)
    if dataset is None:
        raise InvalidDataset(report)
    return dataset
