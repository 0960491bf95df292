"""Chaos under load: SIGKILL one stack process while open-loop Recommend
load runs through Envoy, one process at a time, and count what clients saw:
errors, degraded answers, and when the last answer that was not full came
(the runner restarts what died; an unrelated late timeout also counts, so
read it with the degraded count). Envoy's own death is measured as the time
until the runner has it ready again: clients of a dead ingress get errors.
With a freeze, each process is stopped (SIGSTOP: a pause, a hang) for that
long instead, then let go (SIGCONT), Envoy included: a hung process is not
restarted, so what the others do meanwhile is the finding."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from functools import partial

import psutil

from bench.cpu_profile import stack_processes
from bench.load import run_load, wait_for_full_answer
from recserve_stack.probes import http_ok, wait_until
from recserve_stack.settings import STANDBY_MARK


def serving(processes: list[psutil.Process]) -> list[psutil.Process]:
    """The processes that take traffic: a standby gateway is left out."""
    found = []
    for process in processes:
        try:
            if process.environ().get(STANDBY_MARK) != "standby":
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


# In turn: the serving processes first (the one that hosts the backends, or
# each service's), then Triton, then the ingress.
KILL_ORDER = (
    "gateway", "one-process", "one-process-2", "features", "retriever", "ranker", "tritonserver",
    "envoy",
)  # fmt: skip
FOLLOWS = "RECSERVE_RETRIEVER_FOLLOW"  # a request-path process after the first has it


def candidates(name: str) -> list[psutil.Process]:
    """The serving processes ``name`` stands for: "one-process" is the
    first request-path process (its retriever writes), "one-process-2" a
    further one (its retriever follows)."""
    processes = stack_processes()
    if not name.startswith("one-process"):
        return serving(processes[name])
    found = []
    for process in serving(processes["one-process"]):
        try:
            if (process.environ().get(FOLLOWS) == "true") == (name == "one-process-2"):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def running_names() -> tuple[str, ...]:
    """The stack processes to kill in turn, of those that run (the
    one-process stack has no features, retriever or ranker of its own)."""
    return tuple(name for name in KILL_ORDER if candidates(name))


def _pid(name: str) -> int:
    found = candidates(name)
    if not found:
        raise SystemExit(f"{name} is not running (start the stack first)")
    return found[0].pid  # with two gateways: one of them


def _freeze(pid: int, freeze_s: float) -> None:
    """SIGSTOP now, SIGCONT ``freeze_s`` later (on the load's event loop)."""
    os.kill(pid, signal.SIGSTOP)
    asyncio.get_running_loop().call_later(freeze_s, os.kill, pid, signal.SIGCONT)


async def _load_with_fault(
    target: str, name: str, rate: float, duration_s: float, at_s: float, freeze_s: float
) -> dict[str, object]:
    """Load with ``name`` killed (``freeze_s`` 0) or frozen ``at_s`` into it."""
    pid = _pid(name)
    kill = partial(os.kill, pid, signal.SIGKILL)
    fault = partial(_freeze, pid, freeze_s) if freeze_s else kill
    try:
        result = await run_load(target, rate, duration_s, timeline=True, event=(at_s, fault))
    finally:
        if freeze_s:  # let go however the load ended
            os.kill(pid, signal.SIGCONT)
    bad = [t for t, outcome in result.timeline if t >= at_s and outcome != "full"]
    return {
        "killed": name,
        "frozen_s": freeze_s,
        "pid": pid,
        "sent": result.sent,
        "errors": dict(result.errors),
        "degraded": dict(result.degraded),
        "last_not_full_after_s": round(max(bad) - at_s, 2) if bad else 0.0,
        "p99_ms": result.summary()["p99_ms"],
    }


def _envoy_back(admin: str, pid: int) -> dict[str, object]:
    os.kill(pid, signal.SIGKILL)
    killed = time.perf_counter()
    wait_until(lambda: asyncio.run(http_ok(f"{admin}/ready")), 120, "Envoy ready", 0.05)
    return {"killed": "envoy", "ready_again_after_s": round(time.perf_counter() - killed, 2)}


def run(
    target: str,
    admin: str,
    names: tuple[str, ...],
    rate: float,
    duration_s: float,
    freeze_s: float = 0.0,
) -> list[dict[str, object]]:
    rows = []
    for n, name in enumerate(names):
        if n:
            wait_for_full_answer(target)  # the last one killed is back and serving
        if name == "envoy" and not freeze_s:
            rows.append(_envoy_back(admin, _pid("envoy")))
        else:
            load = _load_with_fault(target, name, rate, duration_s, 2.0, freeze_s)
            rows.append(asyncio.run(load))
    return rows
