"""What validation found: per check a status, per problem the file, rows,
column and values, counted in full with the first few as examples."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

EXAMPLES = 5
VALUE_CHARS = 60

# Every check, in the order they run and print.
CHECKS = {
    "manifest": "dataset.yaml is there and matches the contract",
    "files": "every table's file is there and readable",
    "columns": "required columns present, declared ones present, none undeclared",
    "values": "each value has its column's type, is present where required, is in range",
    "ids": "ids follow the services' id policy",
    "duplicates": "item and user ids are unique; repeated interactions",
    "references": "interactions name known items and users",
    "event types": "event types are declared, their values in range",
    "timestamps": "whole seconds or ISO 8601 with an offset, not before 1970, not in the future",
    "coverage": "items and users that no interaction mentions",
    "split": "users have enough interactions for the build's temporal split",
    "memory": "the tables and the build's working set fit in memory",
}


class Status(Enum):
    PASS = 0
    WARN = 1
    FAIL = 2
    SKIP = 3  # not run: an earlier check failed where it starts from


@dataclass(frozen=True)
class Example:
    row: int | None  # 1 is the first data row (in a CSV, the line after the header)
    value: str

    def where(self) -> str:
        """The row, or the header for a problem with the column itself."""
        return f"row {self.row}" if self.row is not None else "header"


@dataclass
class Finding:
    check: str
    status: Status
    file: str
    column: str | None
    problem: str
    count: int
    examples: list[Example]

    def messages(self) -> list[str]:
        """One line per example: file, row, column and value, then the problem."""
        if self.check == "manifest":  # a key of dataset.yaml, not a column of a table
            key = f", key {self.column}" if self.column else ""
            return [
                f"{self.file}{key}, value {e.value}: {self.problem}" for e in self.examples
            ] or [f"{self.file}{key}: {self.problem}"]
        column = f", column {self.column}" if self.column else ""
        return [
            f"{self.file} {e.where()}{column}, value {e.value}: {self.problem}"
            for e in self.examples
        ] or [f"{self.file}{column}: {self.problem}"]


def show(value: Any) -> str:
    text = repr(value.item() if hasattr(value, "item") and not isinstance(value, str) else value)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 3] + "..."


@dataclass
class Report:
    directory: Path
    findings: list[Finding] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    facts: dict[str, int] = field(default_factory=dict)

    def add(
        self,
        check: str,
        status: Status,
        file: str,
        column: str | None,
        problem: str,
        rows: Sequence[int] | np.ndarray | None,
        values: Iterable[Any],
        count: int | None = None,
    ) -> None:
        """A problem found in ``count`` places (default: one per value);
        ``rows`` are 0-based frame positions, reported 1-based."""
        if check not in CHECKS:
            raise KeyError(check)
        examples = []
        for n, value in enumerate(values):
            if n == EXAMPLES:
                break
            row = None if rows is None else int(rows[n]) + 1
            examples.append(Example(row, show(value)))
        total = count if count is not None else (len(rows) if rows is not None else len(examples))
        self.findings.append(Finding(check, status, file, column, problem, total, examples))

    def flag(
        self,
        check: str,
        status: Status,
        where: tuple[str, str | None],
        problem: str,
        mask: np.ndarray | pd.Series,
        values: pd.Series,
    ) -> None:
        """A finding for the rows where ``mask`` holds (if any), showing
        ``values`` there; ``where`` is (file, column)."""
        hits = np.asarray(mask, dtype=bool)
        if hits.any():
            rows = np.flatnonzero(hits)
            self.add(check, status, where[0], where[1], problem, rows, values.iloc[rows])

    def skip(self, check: str, reason: str) -> None:
        self.skipped.setdefault(check, reason)

    def status(self, check: str) -> Status:
        found = [f.status for f in self.findings if f.check == check]
        if found:
            return max(found, key=lambda s: s.value)
        return Status.SKIP if check in self.skipped else Status.PASS

    @property
    def failed(self) -> bool:
        return any(f.status is Status.FAIL for f in self.findings)

    @property
    def warnings(self) -> int:
        return sum(f.status is Status.WARN for f in self.findings)

    def messages(self, status: Status | None = None) -> list[str]:
        return [
            f"{f.status.name} {f.check}: {line}"
            for f in self.findings
            if status is None or f.status is status
            for line in f.messages()
        ]

    def summary(self) -> str:
        fails = sum(f.status is Status.FAIL for f in self.findings)
        verdict = "FAIL" if self.failed else ("WARN" if self.warnings else "PASS")
        return (
            f"{verdict}: {len(CHECKS)} checks, {fails} failing and {self.warnings} "
            f"warning findings in {self.directory}"
        )


class InvalidDataset(ValueError):
    """A dataset that fails validation: nothing may be built from it."""

    def __init__(self, report: Report) -> None:
        first = report.messages(Status.FAIL)[:3]
        super().__init__(report.summary() + "".join(f"\n  {m}" for m in first))
        self.report = report
