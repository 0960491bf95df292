"""The living dataset: a shop's export plus everything that arrived since,
in the same contract (docs/data.md), as a dataset directory that
``validate`` passes and ``build --dataset`` learns from.

- interactions: the export's rows and every kept app event
  (``<data_dir>/events/app``) of a declared type, whatever its role
  (positive, rating, negative, exposure: the manifest says how the build
  counts each), its value in the type's value column;
- items: the export's, then each change the retriever acknowledged
  (``<data_dir>/events/catalogue``) in order: an upsert adds the item or
  replaces its title, categories and attributes, a soft or hard delete makes
  it inactive (the dataset keeps an item its events name); an item that
  events name and the catalogue never had is kept inactive: learned from,
  never listed until it is upserted;
- users: the export's, and each user first seen in an event, with empty
  attributes.

A column the new rows leave empty is made nullable in the snapshot's
manifest (and said so). ``snapshot.json`` records the export the snapshot
was made from: a snapshot of a snapshot starts from that export again, so
no event is ever counted twice.

A *base* (``pipelines compact``, pipelines/compact.py) is a snapshot of the
events of whole days up to one (``through``) kept under
``<data_dir>/bases/``: a snapshot starts from the newest base made from its
export and adds only the later days' events, so the folded days' files can
go and every later snapshot learns what it would have from the whole log.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from recserve_data import Manifest, load, write_manifest, write_table
from recserve_kit.jsonl_log import hourly_files, read_files, read_unique
from recserve_model.catalogue import changes_dir

RECORD = "snapshot.json"
BASES = "bases"  # <data_dir>/bases/<through day>: compacted bases


@dataclass
class SnapshotReport:
    base: str
    export: str = ""  # the team's export every base and snapshot starts from
    through: str = ""  # a base: the last day of events it holds (else "")
    events_used: int = 0  # added here, beyond the base
    events_total: int = 0  # beyond the export: the base's and these
    events_skipped: int = 0  # of a type the manifest does not declare
    catalogue_changes: int = 0
    new_users: int = 0
    new_items: int = 0  # upserted, not in the export
    items_from_events_only: int = 0  # inactive until upserted
    deactivated: int = 0
    made_nullable: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [
            f"from {self.base}" + (f" (export {self.export})" if self.export != self.base else ""),
            *([f"a base: the events of the days through {self.through}"] if self.through else []),
            f"events: {self.events_used} added ({self.events_total} beyond the export in all), "
            f"{self.events_skipped} of undeclared types left out",
            f"catalogue changes: {self.catalogue_changes} ({self.new_items} new items, "
            f"{self.deactivated} made inactive)",
            f"new users: {self.new_users}; items only events named (inactive): "
            f"{self.items_from_events_only}",
            *(f"{name}: nullable in the snapshot (new rows leave it empty)"
              for name in self.made_nullable),
        ]  # fmt: skip


def read_record(dataset_dir: Path) -> dict[str, Any]:
    record = dataset_dir / RECORD
    return json.loads(record.read_text()) if record.exists() else {}


def export_of(dataset_dir: Path) -> Path:
    """What a snapshot of this dataset directory starts from: a snapshot's
    own base; a base, or an export, itself."""
    record = read_record(dataset_dir)
    if not record or record.get("through"):
        return dataset_dir
    base = Path(record["base"])
    # A base superseded by a newer one is removed: start from the export,
    # and newest_base finds the newer base.
    return base if base.is_dir() else Path(record.get("export") or base)


def newest_base(data_dir: Path, start: Path) -> Path:
    """``start``, or the base under ``<data_dir>/bases`` made from the same
    export that holds the most days."""
    record = read_record(start)
    export, best = record.get("export") or str(start), start
    bases = data_dir / BASES
    for candidate in sorted(bases.iterdir()) if bases.is_dir() else ():
        found = read_record(candidate)
        newer = found.get("through", "") > read_record(best).get("through", "")
        if found.get("export") == export and newer and not candidate.name.startswith("."):
            best = candidate
    return best


def app_events(
    data_dir: Path, manifest: Manifest, after: str = "", through: str = ""
) -> tuple[pd.DataFrame, int]:
    """The kept events of a declared type as interaction rows, of the days
    after ``after`` and through ``through`` (UTC dates; "": no bound); how
    many were of an undeclared type."""
    declared = manifest.interactions.event_types
    rows, skipped = [], 0
    hours = hourly_files(data_dir / "events" / "app")
    days = [h for h in sorted(hours) if h[:10] > after and (not through or h[:10] <= through)]
    seen: set[str] = set()
    for event in read_files([path for hour in days for path in hours[hour]]):
        if event["event_id"] in seen:
            continue  # a retry kept twice
        seen.add(event["event_id"])
        kind = declared.get(event["event_type"])
        if kind is None:
            skipped += 1
            continue
        row = {k: event[k] for k in ("user_id", "item_id", "event_type")}
        row["timestamp"] = int(event["timestamp"])
        if kind.value_column:
            row[kind.value_column] = float(event["value"])
        rows.append(row)
    required = ["user_id", "item_id", "timestamp", "event_type"]
    frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=required)
    return frame, skipped


def catalogue_changes(data_dir: Path) -> list[dict[str, Any]]:
    directory = changes_dir(data_dir)
    changes = list(read_unique(directory, "change_id")) if directory.exists() else []
    return sorted(changes, key=lambda c: c["at"])  # stable: a file's order within one time


def changed_items(
    items: pd.DataFrame, changes: list[dict[str, Any]], report: SnapshotReport
) -> pd.DataFrame:
    """The items after the changes, in order; the columns the items table has."""
    by_id: dict[str, dict[str, Any]] = {r["item_id"]: r for r in items.to_dict("records")}
    known = set(by_id)
    for change in changes:
        item_id = change["item_id"]
        if change["op"] == "upsert":
            row = by_id.get(item_id, {})
            row = {**row, "item_id": item_id, "title": change["title"] or item_id}
            row |= {"categories": change["categories"], "active": bool(change["active"])}
            if "year" in items.columns and change.get("year"):
                row["year"] = change["year"]
            for name, value in (change.get("attributes") or {}).items():
                if name in items.columns:
                    row[name] = {"true": True, "false": False}.get(value, value)
            by_id[item_id] = row
        elif item_id in by_id:
            by_id[item_id] = {**by_id[item_id], "active": False}
            report.deactivated += 1
    report.new_items = len(set(by_id) - known)
    return pd.DataFrame(list(by_id.values()), columns=items.columns)


def with_named(frame: pd.DataFrame, key: str, named: pd.Series, **fixed: Any) -> pd.DataFrame:
    """``frame`` with a row for each id in ``named`` it lacks (``fixed`` set, the rest empty)."""
    missing = sorted(set(named) - set(frame[key]))
    if not missing:
        return frame
    extra = pd.DataFrame({key: missing, **{k: [v] * len(missing) for k, v in fixed.items()}})
    return pd.concat([frame, extra], ignore_index=True)


def nullable_where_empty(
    manifest: Manifest, tables: dict[str, pd.DataFrame], report: SnapshotReport
) -> Manifest:
    """The manifest with every declared column the tables leave empty nullable."""
    updates: dict[str, Any] = {}
    for kind, table in manifest.tables().items():
        columns = dict(table.columns)
        for name, column in table.columns.items():
            if not column.nullable and tables[kind][name].isna().any():
                columns[name] = column.model_copy(update={"nullable": True})
                report.made_nullable.append(f"{kind}.{name}")
        updates[kind] = table.model_copy(update={"columns": columns, "file": f"{kind}.parquet"})
    return manifest.model_copy(update=updates)


def snapshot(data_dir: Path, dataset_dir: Path, out: Path, through: str = "") -> SnapshotReport:
    """Writes the living dataset of ``dataset_dir``'s export into ``out``:
    the newest base's and every later event, or (``through``, a base) the
    events through that day only."""
    base = newest_base(data_dir, export_of(dataset_dir).resolve())
    data = load(base)
    record = read_record(base)
    report = SnapshotReport(str(base), record.get("export") or str(base), through)
    after = record.get("through", "")
    events, report.events_skipped = app_events(data_dir, data.manifest, after, through)
    report.events_used = len(events)
    report.events_total = record.get("events_total", 0) + len(events)
    changes = catalogue_changes(data_dir)
    report.catalogue_changes = len(changes)
    items = changed_items(data.items, changes, report)
    before = len(items)
    items = with_named(items, "item_id", events["item_id"], categories=[], active=False)
    items["title"] = items["title"].fillna(items["item_id"])
    items["categories"] = [c if isinstance(c, list) else list(c) for c in items["categories"]]
    report.items_from_events_only = len(items) - before
    interactions = pd.concat([data.interactions, events], ignore_index=True)
    tables = {"items": items, "interactions": interactions}
    if data.users is not None:
        users = with_named(data.users, "user_id", interactions["user_id"])
        report.new_users = len(users) - len(data.users)
        tables["users"] = users
    manifest = nullable_where_empty(data.manifest, tables, report)
    manifest = manifest.model_copy(
        update={"source": f"pipelines snapshot of {base}: the export and what arrived since"}
    )
    out.mkdir(parents=True, exist_ok=True)
    specs = manifest.tables()
    for kind, frame in tables.items():
        write_table(frame, out, specs[kind], manifest.csv)
    write_manifest(out, manifest)
    (out / RECORD).write_text(json.dumps(asdict(report), indent=2) + "\n")
    return report
