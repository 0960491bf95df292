"""App events past their keep folded into a base, then removed.

The living dataset learns from every event since the export
(pipelines/snapshot.py), so its events cannot simply be pruned. ``compact``
writes the events of the whole days older than ``keep_days`` into a base,
``<data_dir>/bases/<its last day>`` (a dataset directory that ``validate``
passes, written whole or not at all), and only then removes those days'
folders from ``events/app`` and the bases it supersedes. Every later snapshot starts from the newest
base and adds the later days: it learns what it would have learned from the
whole log. The catalogue's changes are kept (few; replayed in order on a
base they give the same items).

What is lost: the outcome report and the guardrail read events from the
log, so they no longer see the removed days (the impressions of those
days are kept only ``impressions_keep_days`` anyway).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipelines import dataset
from pipelines.snapshot import BASES, export_of, newest_base, read_record, snapshot
from recserve_data import Status, inspect
from recserve_kit.jsonl_log import DAY


class CompactionRefused(RuntimeError):
    pass


@dataclass
class Compaction:
    base: str = ""  # the base written now ("" when no day was old enough)
    through: str = ""  # the newest base's last day
    events_folded: int = 0
    removed_days: list[str] = field(default_factory=list)
    removed_bases: list[str] = field(default_factory=list)  # superseded by the new one

    def lines(self) -> list[str]:
        if not self.through:
            return ["no base: no day of events is older than the keep"]
        made = f"base {self.base}: {self.events_folded} events" if self.base else "no new base"
        removed = ", ".join(self.removed_days) or "none"
        return [made, f"events through {self.through} are in a base; removed days: {removed}"]


def event_days(data_dir: Path) -> list[str]:
    directory = data_dir / "events" / "app"
    if not directory.is_dir():
        return []
    return sorted(d.name for d in directory.iterdir() if d.is_dir() and DAY.fullmatch(d.name))


def compact(
    data_dir: Path, dataset_dir: Path, keep_days: int, now: float | None = None
) -> Compaction:
    """Folds the event days older than ``keep_days`` (before ``now``) into a
    new base and removes every day a base holds."""
    if keep_days < 1:
        raise CompactionRefused("keep_days must be 1 or more: today's events are being written")
    now = time.time() if now is None else now
    cutoff = time.strftime("%Y-%m-%d", time.gmtime(now - keep_days * 86_400))
    start = newest_base(data_dir, export_of(dataset_dir).resolve())
    held = read_record(start).get("through", "")
    old = [d for d in event_days(data_dir) if held < d < cutoff]
    result = Compaction(through=held)
    if old:
        result.through = old[-1]
        root = data_dir / BASES
        root.mkdir(parents=True, exist_ok=True)
        temporary, final = root / f".{result.through}.tmp", root / result.through
        shutil.rmtree(temporary, ignore_errors=True)  # a crashed run's
        report = snapshot(data_dir, dataset_dir, temporary, through=result.through)
        validation, _ = inspect(temporary, dataset.NEEDS)
        if validation.failed:
            shutil.rmtree(temporary, ignore_errors=True)
            problems = [f.problem for f in validation.findings if f.status == Status.FAIL]
            raise CompactionRefused(f"the base does not validate: {'; '.join(problems)}")
        shutil.rmtree(final, ignore_errors=True)
        temporary.rename(final)
        result.base, result.events_folded = str(final), report.events_used
        for older in root.iterdir():  # the new base holds everything they did
            same = read_record(older).get("export") == report.export
            if same and older.name < final.name and not older.name.startswith("."):
                shutil.rmtree(older, ignore_errors=True)
                result.removed_bases.append(older.name)
    for day in event_days(data_dir):
        if result.through and day <= result.through:
            shutil.rmtree(data_dir / "events" / "app" / day, ignore_errors=True)
            result.removed_days.append(day)
    return result
