"""`recserve-stack retrain`: one unattended cycle against the running stack.

App events past their keep folded into a base (`pipelines compact`) -> the
living dataset (`pipelines snapshot`: the export and what arrived since)
-> a build as a candidate (the quality gate: a refusal keeps the
current model and says why) -> a rollout judged by the outcome guardrail ->
promoted or rolled back, by the judge -> a report beside the artifact
(`retrain.json`). The pipelines run as processes (the runner imports none).

Safe to run twice at once (the second is refused: the kernel's lock on a
file that names the running one's pid, let go of when its process ends; a
dead one's is taken over, and said so), after a crash (a half-written
snapshot is a hidden temp directory, removed by the next run; a build is
published whole or not at all; a rollout the crashed cycle started goes on
in the ranker, and the next run waits for it instead of starting
another), and with no new data (it says so and builds nothing).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from recserve.ranker.v1 import ranker_pb2 as pb
from recserve_cli import console as cli_console
from recserve_kit.config import load_settings
from recserve_model import artifacts
from recserve_stack.retrain_schedule import every_day_at as every_day_at_time
from recserve_stack.retrain_schedule import parse_daily
from recserve_stack.rollout_cli import call, prepare_arms, until_ended
from recserve_stack.settings import StackSettings

STATE = ("retrain", "cycle.json")  # the cycle in progress: a crash's next run reads it
LOCK = ("retrain", "LOCK")
ACTIVE = ("running", "paused")
console = cli_console()


class RetrainRefused(RuntimeError):
    pass


@dataclass
class Plan:
    baseline_rate: float
    min_drop: float
    alpha: float = 0.05
    steps: list[float] = field(default_factory=lambda: [5.0, 25.0, 50.0, 100.0])
    soak_s: float = 0.0
    min_requests: int = 0
    max_p99_ms: float = 0.0  # 0: the ranker's limit
    events_keep_days: int = 30  # older app events folded into a base first; 0: never


@dataclass
class Report:
    started_at: float
    outcome: str = ""  # nothing-new, refused, promoted, rolled_back, still-running, ...
    reason: str = ""
    compacted: str = ""  # what folding old events into a base did (pipelines compact)
    snapshot: str = ""
    learned: dict[str, Any] = field(default_factory=dict)  # the snapshot's counts
    version: str = ""
    gate: dict[str, Any] = field(default_factory=dict)  # the build's held-out figures
    rollout: dict[str, Any] = field(default_factory=dict)  # the judge's decisions
    # Each step's wall and CPU seconds (the cycle's own and its pipelines'
    # processes'; the serving stack's share of a rollout is not in it).
    steps: dict[str, dict[str, float]] = field(default_factory=dict)


def cpu_seconds() -> float:
    """CPU this process and its finished children have used."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@contextmanager
def timed(report: Report, step: str) -> Iterator[None]:
    """Records ``step``'s wall and CPU seconds in the report, also when it fails."""
    wall, cpu = time.monotonic(), cpu_seconds()
    try:
        yield
    finally:
        report.steps[step] = {
            "wall_s": round(time.monotonic() - wall, 2),
            "cpu_s": round(cpu_seconds() - cpu, 2),
        }


@contextmanager
def one_at_a_time(data_dir: Path) -> Iterator[str]:
    """Holds the cycle's lock; yields a note when a dead cycle's was taken over.

    The lock is the kernel's (``flock``) on a file that names the holder's
    pid: a cycle that dies, however, lets go of it with its process. A pid
    alone would not do where a cycle runs as a pod's pid 1: the next pod's
    pid 1 would find "its own" pid alive and be refused forever."""
    path = data_dir.joinpath(*LOCK)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_CREAT | os.O_RDWR)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = path.read_text().strip() or "?"
            raise RetrainRefused(
                f"a retrain is running (pid {holder}, {path}); this one does nothing"
            ) from None
        left = os.read(descriptor, 64).decode(errors="replace").strip()
        note = f"took over the lock of pid {left}, which is gone" if left else ""
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, str(os.getpid()).encode(), 0)
        try:
            yield note
        finally:
            os.ftruncate(descriptor, 0)  # empty: nobody holds it
    finally:
        os.close(descriptor)  # lets go of the lock


def pipelines_environment() -> dict[str, str]:
    """The pipelines' environment: OpenMP threads that wait asleep, not
    spinning. A cycle's build shares the cores with the serving stack, where
    torch's spinning threads doubled its time and its CPU (docs/benchmarks.md,
    "A retrain cycle, by step"); a setting of the operator's own is kept."""
    return {"OMP_WAIT_POLICY": "PASSIVE", **os.environ}


# The cycle's steps run niced: where they share the cores with the serving
# stack, serving comes first, and a build only takes longer.
PIPELINES_NICENESS = 10


def lower_priority() -> None:
    os.nice(PIPELINES_NICENESS)


def pipelines(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipelines", *args],
        capture_output=True,
        text=True,
        check=False,
        env=pipelines_environment(),
        preexec_fn=lower_priority,
    )


def take_snapshot(data_dir: Path, stamp: str) -> Path:
    """The living dataset under snapshots/<stamp>, whole or not at all."""
    root = data_dir / "snapshots"
    root.mkdir(parents=True, exist_ok=True)
    for left in root.glob(".*.tmp"):  # a crashed cycle's half-written one
        shutil.rmtree(left, ignore_errors=True)
    temporary = root / f".{stamp}.tmp"
    done = pipelines("snapshot", "--data-dir", str(data_dir), "--out", str(temporary))
    if done.returncode:
        shutil.rmtree(temporary, ignore_errors=True)
        raise RetrainRefused(f"the snapshot failed: {tail(done)}")
    final = root / stamp
    temporary.rename(final)
    return final


def compact_events(data_dir: Path, keep_days: int) -> str:
    """Older events folded into a base (pipelines/compact.py), so the logs
    stay bounded; a failure is reported and the cycle goes on (the events
    are all still there, and the snapshot reads them)."""
    done = pipelines("compact", "--data-dir", str(data_dir), "--keep-days", str(keep_days))
    return ("failed: " if done.returncode else "") + tail(done, 3)


def tail(done: subprocess.CompletedProcess[str], lines: int = 6) -> str:
    return " | ".join((done.stdout + done.stderr).strip().splitlines()[-lines:])


def learned_counts(dataset_dir: Path) -> tuple[int, int]:
    """(events, catalogue changes) a dataset holds beyond its export."""
    record = dataset_dir / "snapshot.json"
    if not record.exists():
        return 0, 0
    counts = json.loads(record.read_text())
    events = counts.get("events_total", counts["events_used"])  # a base's and its own
    return int(events), int(counts["catalogue_changes"])


def nothing_new(data_dir: Path, snapshot: Path) -> str:
    """Why nothing needs building ("" when something does)."""
    try:
        current = artifacts.current(data_dir)
    except artifacts.ArtifactError:
        return ""
    built_from = Path(json.loads((current / "manifest.json").read_text()).get("dataset_dir", ""))
    if learned_counts(snapshot) == learned_counts(built_from):
        events, changes = learned_counts(snapshot)
        return (
            f"no new events or catalogue changes since {current.name} "
            f"({events} events and {changes} changes beyond the export, as then)"
        )
    return ""


def candidate_version(build_output: str) -> str | None:
    """The version a candidate build names (pipelines.current.candidate_line)."""
    found = re.search(r"rollout start ([A-Za-z0-9][\w.+-]*)\s*$", build_output, re.MULTILINE)
    return found.group(1) if found else None


def build_candidate(data_dir: Path, snapshot: Path, report: Report) -> bool:
    dataset = ("--dataset", str(snapshot))
    done = pipelines("build", "--data-dir", str(data_dir), *dataset, "--candidate")
    version = candidate_version(done.stdout + done.stderr)
    if done.returncode or version is None:
        report.outcome, report.reason = "refused", tail(done)
        return False
    report.version = version
    directory = artifacts.artifacts_root(data_dir) / report.version
    report.gate = json.loads((directory / "manifest.json").read_text()).get("metrics", {})
    return True


def roll_out(settings: StackSettings, plan: Plan, report: Report, resume: bool) -> None:
    """Starts the guarded rollout (unless resuming one) and waits for its end."""
    if not resume:
        prepare_arms([report.version], 1800.0)
        request = pb.StartRolloutRequest(
            version=report.version, steps_percent=plan.steps, soak_s=plan.soak_s,
            min_requests=plan.min_requests, max_p99_ms=plan.max_p99_ms,
            guardrail_baseline_rate=plan.baseline_rate,
            guardrail_min_drop=plan.min_drop, guardrail_alpha=plan.alpha,
        )  # fmt: skip
        call("StartRollout", request, settings)
    status, _ = until_ended(settings=settings)
    report.outcome = status.status if status.status not in ACTIVE else "still-running"
    last = status.last_verdict.reason if status.HasField("last_verdict") else ""
    report.reason = status.reason or last
    report.rollout = {
        "status": status.status,
        "decisions": [
            {"action": d.action, "share_percent": d.share_percent, "reason": d.reason,
             "figures": dict(d.figures)}
            for d in since_last_start(status.history)
        ],
    }  # fmt: skip


def since_last_start(history: Sequence[pb.RolloutDecision]) -> list[pb.RolloutDecision]:
    """This rollout's decisions: from the last start on. The history holds
    earlier rollouts' too, and a cut by the clock took in the promotion of a
    cycle that ended within a second of this one's start."""
    starts = [i for i, d in enumerate(history) if d.action == "start"]
    return list(history[starts[-1] :]) if starts else list(history)


def retrain(settings: StackSettings, plan: Plan) -> Report:
    """One cycle; the report, also kept beside the artifact it built."""
    data_dir = settings.data_dir
    state_path = data_dir.joinpath(*STATE)
    with one_at_a_time(data_dir) as note:
        previous = json.loads(state_path.read_text()) if state_path.exists() else None
        status = call("GetRollout", pb.GetRolloutRequest(), settings)
        if status.status in ACTIVE:
            if previous is None or previous.get("version") != status.candidate_version:
                raise RetrainRefused(f"a rollout of {status.candidate_version} is {status.status}")
            report = Report(**previous)  # a crashed cycle's rollout: wait for it
            with timed(report, "rollout (resumed)"):
                roll_out(settings, plan, report, resume=True)
            return finish(data_dir, report, state_path)
        report = Report(started_at=time.time(), reason=note)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(report.started_at))
        if plan.events_keep_days:
            with timed(report, "compact"):
                report.compacted = compact_events(data_dir, plan.events_keep_days)
        with timed(report, "snapshot"):
            snapshot = take_snapshot(data_dir, stamp)
        report.snapshot = str(snapshot)
        report.learned = json.loads((snapshot / "snapshot.json").read_text())
        why = nothing_new(data_dir, snapshot)
        if why:
            shutil.rmtree(snapshot, ignore_errors=True)
            report.outcome, report.reason, report.snapshot = "nothing-new", why, ""
            return finish(data_dir, report, state_path)
        with timed(report, "build"):
            built = build_candidate(data_dir, snapshot, report)
        if built:
            state_path.parent.mkdir(parents=True, exist_ok=True)
            state_path.write_text(json.dumps(asdict(report)))
            with timed(report, "rollout"):
                roll_out(settings, plan, report, resume=False)
        return finish(data_dir, report, state_path)


def finish(data_dir: Path, report: Report, state_path: Path) -> Report:
    """The report beside the artifact (and the last one under retrain/)."""
    text = json.dumps(asdict(report), indent=2) + "\n"
    if report.version:
        (artifacts.artifacts_root(data_dir) / report.version / "retrain.json").write_text(text)
    data_dir.joinpath("retrain", "last.json").write_text(text)
    if report.outcome != "still-running":
        state_path.unlink(missing_ok=True)
    return report


def retrain_command(
    guardrail_baseline_rate: Annotated[
        float, typer.Option(min=0.0001, max=0.9999, help="The stable's conversion, about.")
    ] = 0.1,
    guardrail_min_drop: Annotated[
        float, typer.Option(min=0.0001, max=0.99, help="Relative drop the guardrail rules out.")
    ] = 0.2,
    guardrail_alpha: Annotated[float, typer.Option(min=0.0001, max=0.5)] = 0.05,
    steps: Annotated[str, typer.Option(help="Comma-separated percents; default 5,25,50,100.")] = "",
    soak_s: Annotated[float, typer.Option(min=0, help="Per step; 0: the ranker's.")] = 0,
    min_requests: Annotated[int, typer.Option(min=0, help="Per step; 0: the ranker's.")] = 0,
    max_p99_ms: Annotated[float, typer.Option(min=0, help="0: the ranker's (150 ms).")] = 0,
    events_keep_days: Annotated[
        int,
        typer.Option(
            min=0, help="App events older than this are folded into a base first; 0: never."
        ),
    ] = 30,
    every_day_at: Annotated[
        str, typer.Option(help="HH:MM[:SS] UTC: run a cycle every day then, until stopped.")
    ] = "",
) -> None:
    """One unattended cycle: snapshot, build a candidate through the gate,
    a guarded rollout to its end, a report beside the artifact; or, with
    --every-day-at, one such cycle a day (retrain_schedule)."""
    if every_day_at:
        try:
            parse_daily(every_day_at)
        except ValueError as bad:
            raise typer.BadParameter(str(bad), param_hint="--every-day-at") from None
        options = {
            "--guardrail-baseline-rate": guardrail_baseline_rate,
            "--guardrail-min-drop": guardrail_min_drop,
            "--guardrail-alpha": guardrail_alpha,
            "--steps": steps,
            "--soak-s": soak_s,
            "--min-requests": min_requests,
            "--max-p99-ms": max_p99_ms,
            "--events-keep-days": events_keep_days,
        }
        cycle = [sys.executable, "-m", "recserve_stack", "retrain"]
        every_day_at_time(every_day_at, cycle + [f"{k}={v}" for k, v in options.items()])
        return
    plan = Plan(guardrail_baseline_rate, guardrail_min_drop, guardrail_alpha, soak_s=soak_s,
                min_requests=min_requests, max_p99_ms=max_p99_ms,
                events_keep_days=events_keep_days)  # fmt: skip
    if steps:
        plan.steps = [float(s) for s in steps.split(",") if s.strip()]
    try:
        report = retrain(load_settings(StackSettings), plan)
    except RetrainRefused as refused:
        console.print(f"[red]{refused}[/]")
        raise typer.Exit(1) from None
    console.print(report_table(report))


def report_table(report: Report) -> Table:
    """The cycle's report, as the command prints it."""
    table = Table(title=f"retrain: {report.outcome}", title_justify="left", show_header=False)
    table.add_row("reason", report.reason)
    if report.learned:
        learned = report.learned
        table.add_row(
            "learned",
            f"{learned.get('events_total', learned['events_used'])} events beyond the export, "
            f"{learned['new_users']} new users, "
            f"{learned['new_items']} new items, {learned['deactivated']} made inactive",
        )
    if report.version:
        ndcg = {m: round(v["ndcg@10"], 4) for m, v in report.gate.items() if "ndcg@10" in v}
        table.add_row("candidate", report.version)
        table.add_row("gate (ndcg@10)", ", ".join(f"{m} {v}" for m, v in ndcg.items()))
    if report.compacted:
        table.add_row("compacted", report.compacted)
    for step, took in report.steps.items():
        table.add_row(step, f"{took['wall_s']} s, CPU {took['cpu_s']} s")
    return table
