"""Which requests a report covers: a run, or a time window.

Span files are appended to across stack starts, so a traces folder holds
every run since it was made. A run is the requests served by one set of
gateway processes, with no gap longer than ``gap_s`` between one request and
the next. A new run starts at a gap (a quiet spell between two loads), or
at a request from a gateway process (``service.instance.id``, new at every
start) not seen in the run when every process of the run has answered its
last request: the stack was restarted. A process that joins while others
serve (a canary, a replica) stays in the run. By default a report covers
the latest run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from bench.report.requests import Request

DEFAULT_GAP_S = 60.0
NS = 1_000_000_000
RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class WindowError(ValueError):
    """A run that is not there, or a time that does not parse."""


@dataclass(frozen=True)
class Run:
    number: int  # 1 is the oldest
    start_ns: int
    end_ns: int
    requests: int


@dataclass(frozen=True)
class Window:
    start_ns: int
    end_ns: int
    label: str  # for titles: which run or window, and when


def clock(ns: int) -> str:
    return datetime.fromtimestamp(ns / NS, UTC).strftime("%Y-%m-%d %H:%M:%S")


def span_of(start_ns: int, end_ns: int) -> str:
    start, end = clock(start_ns), clock(end_ns)
    same_day = start[:10] == end[:10]
    return f"{start} to {end[11:] if same_day else end} UTC"


def run_starts(requests: Sequence[Request], gap_s: float) -> list[int]:
    """Indexes of the requests (sorted by start) that begin a run."""
    if not requests:
        return []
    last_seen = {r.instance: r.start_ns for r in requests}  # each process's last request
    starts: list[int] = []
    members: set[str] = set()
    for n, r in enumerate(requests):
        gap = n > 0 and r.start_ns - requests[n - 1].start_ns > gap_s * NS
        restarted = r.instance not in members and all(last_seen[m] < r.start_ns for m in members)
        if n == 0 or gap or restarted:
            starts.append(n)
            members = set()
        members.add(r.instance)
    return starts


def split_runs(requests: Sequence[Request], gap_s: float = DEFAULT_GAP_S) -> list[Run]:
    """The runs among requests sorted by start, oldest first."""
    starts = run_starts(requests, gap_s)
    ends = [*starts[1:], len(requests)] if starts else []
    return [
        Run(k, requests[a].start_ns, requests[b - 1].start_ns, b - a)
        for k, (a, b) in enumerate(zip(starts, ends, strict=True), start=1)
    ]


def parse_time(text: str, now_s: float | None = None) -> int:
    """Nanoseconds since the epoch from ISO 8601 (UTC unless it says), Unix
    seconds, or a time before now: ``15m``, ``2h``, ``1d``."""
    text = text.strip()
    relative = RELATIVE.match(text)
    if relative:
        now = time.time() if now_s is None else now_s
        return int((now - float(relative[1]) * UNITS[relative[2]]) * NS)
    try:
        return int(float(text) * NS)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise WindowError(f"{text!r}: not ISO 8601, Unix seconds or 15m/2h/1d") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * NS)


def select(
    requests: Sequence[Request],
    runs: Sequence[Run],
    run: int | None = None,
    since: str = "",
    until: str = "",
    all_runs: bool = False,
) -> tuple[Window, list[Request]]:
    """The requests of one run (the latest by default), of every run, or of
    a time window (``since``/``until`` win over the run), and what they are."""
    if since or until:
        start = parse_time(since) if since else 0
        end = parse_time(until) if until else time.time_ns()
        chosen = [r for r in requests if start <= r.start_ns <= end]
        start = start or (chosen[0].start_ns if chosen else 0)
        return Window(start, end, f"window {span_of(start, end)}"), chosen
    if not runs:
        return Window(0, 0, "no requests"), []
    if all_runs:
        first, last = runs[0], runs[-1]
        label = f"all {len(runs)} runs, {span_of(first.start_ns, last.end_ns)}"
        return Window(first.start_ns, last.end_ns, label), list(requests)
    number = run if run is not None else len(runs)
    if not 1 <= number <= len(runs):
        raise WindowError(f"run {number}: there are runs 1 to {len(runs)}")
    chosen_run = runs[number - 1]
    latest = " (the latest)" if number == len(runs) else ""
    label = (
        f"run {number} of {len(runs)}{latest}, {span_of(chosen_run.start_ns, chosen_run.end_ns)}"
    )
    chosen = [r for r in requests if chosen_run.start_ns <= r.start_ns <= chosen_run.end_ns]
    return Window(chosen_run.start_ns, chosen_run.end_ns, label), chosen
