"""The checks across rows and tables, on typed columns: duplicates,
references, event types, coverage, the split's minimum and memory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import psutil

from recserve_data.manifest import Manifest
from recserve_data.report import Report, Status

GIB = 1 << 30


@dataclass(frozen=True)
class Needs:
    """What the caller's build needs of a dataset, beyond the contract."""

    min_user_interactions: int = 1
    # Bytes the build's own working set takes for (users, items, interactions).
    working_set: Callable[[int, int, int], int] | None = None
    # The memory to hold it against; default: what the machine has free now.
    memory_bytes: int | None = None
    # The event roles the build learns from, counted once per user and item
    # against min_user_interactions (a WARN: such users are left out); empty:
    # every interaction counts.
    learned_roles: frozenset[str] = frozenset()


def duplicates(report: Report, file: str, ids: pd.Series, column: str) -> None:
    repeated = ids.notna() & ids.duplicated(keep="first")
    report.flag(
        "duplicates", Status.FAIL, (file, column), "repeats an id an earlier row has", repeated, ids
    )


def repeated_interactions(report: Report, file: str, frame: pd.DataFrame) -> None:
    keys = ["user_id", "item_id", "timestamp", "event_type"]
    if not set(keys) <= set(frame.columns):
        return
    repeated = frame.duplicated(keys, keep="first") & frame[keys].notna().all(axis=1)
    problem = "repeats an earlier interaction (same user, item, timestamp and event type)"
    pairs = frame["user_id"] + " " + frame["item_id"]
    report.flag("duplicates", Status.WARN, (file, "user_id, item_id"), problem, repeated, pairs)


def references(
    report: Report, file: str, refs: pd.Series, known: pd.Series, column: str, table: str
) -> None:
    unknown = refs.notna() & ~refs.isin(set(known.dropna()))
    report.flag(
        "references", Status.FAIL, (file, column), f"names no row of {table}", unknown, refs
    )


def event_types(report: Report, manifest: Manifest, frame: pd.DataFrame) -> None:
    """Undeclared event types fail; declared ones no row has warn."""
    spec = manifest.interactions
    kinds = frame["event_type"]
    declared = sorted(spec.event_types)
    problem = f"is not a declared event type ({', '.join(declared)})"
    undeclared = kinds.notna() & ~kinds.isin(declared)
    report.flag("event types", Status.FAIL, (spec.file, "event_type"), problem, undeclared, kinds)
    for name in declared:
        if not (kinds == name).any():
            problem = "is declared but no interaction has it"
            report.add(
                "event types", Status.WARN, spec.file, "event_type", problem, None, [name], 1
            )


def event_values(
    report: Report, manifest: Manifest, frame: pd.DataFrame, raw: pd.DataFrame
) -> None:
    """Each event type's value, where it has a value column: present and in
    its range (shown as the file holds it)."""
    spec = manifest.interactions
    for name, event in spec.event_types.items():
        column = event.value_column
        if column is None or column not in frame:
            continue
        of_type = (frame["event_type"] == name).fillna(False)
        values = frame[column]
        low = event.min if event.min is not None else -np.inf
        high = event.max if event.max is not None else np.inf
        outside = of_type & values.notna() & ((values < low) | (values > high))
        where = (spec.file, column)
        problem = f"is empty or not a number; a {name} event needs a value"
        report.flag(
            "event types", Status.FAIL, where, problem, of_type & values.isna(), raw[column]
        )
        problem = f"is outside the {name} range [{event.min}, {event.max}]"
        report.flag("event types", Status.FAIL, where, problem, outside, raw[column])


def coverage(report: Report, file: str, ids: pd.Series, used: pd.Series, what: str) -> None:
    idle = ids.notna() & ~ids.isin(set(used.dropna()))
    column = ids.name if isinstance(ids.name, str) else None
    report.flag(
        "coverage", Status.WARN, (file, column), f"no interaction names this {what}", idle, ids
    )


def split(
    report: Report, file: str, events: pd.DataFrame, roles: dict[str, str], needs: Needs
) -> None:
    """Users with fewer of what the build learns from than its temporal
    split needs (distinct items with a learned event where the roles are
    known, rows where not): the build leaves them out, a WARN with their
    count and each at its first row, never a FAIL of the whole export."""
    minimum = needs.min_user_interactions
    counts = events["user_id"].value_counts()
    what = "interactions"
    if needs.learned_roles and {"item_id", "event_type"} <= set(events):
        learned = [name for name, role in roles.items() if role in needs.learned_roles]
        kept = events[events["event_type"].isin(learned)].drop_duplicates(["user_id", "item_id"])
        counts = kept["user_id"].value_counts().reindex(counts.index, fill_value=0)
        what = f"items with a {' or '.join(sorted(needs.learned_roles))} event"
    short = counts[counts < minimum]
    if short.empty:
        return
    users = events["user_id"].reset_index(drop=True).drop_duplicates()
    users = users[users.isin(short.index)]
    outcome = f"the build leaves {len(short)} of {len(counts)} users out"
    if len(short) == len(counts):  # valid, and the build refuses it (UnsupportedDataset)
        outcome += ", nothing to train on"
    report.add(
        "split",
        Status.WARN,
        file,
        "user_id",
        f"has fewer than {minimum} {what}, which the build's temporal split needs: "
        f"{outcome} (fewest: {int(short.min())})",
        users.index.to_numpy(),
        users,
    )


def memory(
    report: Report,
    label: str,
    frames: list[pd.DataFrame],
    counts: tuple[int, int, int],
    needs: Needs,
) -> None:
    tables = sum(int(f.memory_usage(deep=True).sum()) for f in frames)
    work = needs.working_set(*counts) if needs.working_set is not None else 0
    available = needs.memory_bytes or int(psutil.virtual_memory().available)
    total = tables + work
    report.facts.update(memory_needed=total, memory_available=available)
    problem = (
        f"needs about {total / GIB:.2f} GiB (tables {tables / GIB:.2f}, the build's working "
        f"set {work / GIB:.2f}) of {available / GIB:.2f} GiB available"
    )
    if total > available:
        report.add("memory", Status.FAIL, label, None, problem, None, [])
    elif total > available // 2:
        report.add("memory", Status.WARN, label, None, problem + " (over half)", None, [])
