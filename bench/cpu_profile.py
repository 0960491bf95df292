"""CPU per request of each stack process during an open-loop load run.

Reads every component's CPU time (user + system) before and after the load
and divides by the requests sent: where a request's CPU goes. Each
component's resident memory after the load is recorded beside.
"""

from __future__ import annotations

import asyncio

import psutil

from bench.load import run_load

COMPONENTS = {
    "envoy": "envoy -c",
    "gateway": "services.gateway",
    "features": "services.features",
    "retriever": "services.retriever",
    "ranker": "services.ranker",
    # RECSERVE_STACK_ONE_PROCESS: the gateway hosting the three above.
    "one-process": "services.one_process",
    "tritonserver": "tritonserver --model-repository",
    "triton python stubs": "triton_python_backend_stub",
}


def stack_processes() -> dict[str, list[psutil.Process]]:
    found: dict[str, list[psutil.Process]] = {name: [] for name in COMPONENTS}
    for process in psutil.process_iter(["cmdline"]):
        command = " ".join(process.info["cmdline"] or [])
        for name, marker in COMPONENTS.items():
            if marker in command and "pytest" not in command:
                found[name].append(process)
    return found


def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def running_stack() -> dict[str, list[psutil.Process]]:
    """The running stack's processes by component: either every service its
    own process, or one process hosting the backends; exits naming what is
    missing."""
    processes = stack_processes()
    apart = ("features", "retriever", "ranker")
    one = bool(processes["one-process"])
    expected = [n for n in processes if n not in (apart if one else ("one-process",))]
    # Beside the request-path processes, a plain gateway runs only as a standby.
    missing = [n for n in expected if not processes[n] and not (one and n == "gateway")]
    if missing:
        raise SystemExit(f"not running: {', '.join(missing)} (start the stack first)")
    return {name: processes[name] for name in expected}


def rss_mb(processes: list[psutil.Process]) -> float:
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return round(total / 2**20, 1)


def run(target: str, rate: float, duration: float) -> dict[str, object]:
    processes = running_stack()
    # The load generator shares these cores: its own CPU is reported beside.
    processes["load generator (this process)"] = [psutil.Process()]
    before = {name: cpu_seconds(p) for name, p in processes.items()}
    result = asyncio.run(run_load(target, rate, duration))
    sent = result.summary()["sent"]
    assert isinstance(sent, int) and sent > 0
    per_request = {
        name: round(1000 * (cpu_seconds(p) - before[name]) / sent, 2)
        for name, p in processes.items()
    }
    return {
        "rate_rps": rate,
        "duration_s": duration,
        "sent": sent,
        "cpu_ms_per_request": per_request,
        "total_cpu_ms_per_request": round(
            sum(ms for name, ms in per_request.items() if not name.startswith("load")), 2
        ),
        "latency": result.summary(),
        # Resident memory after the load, each component's processes together.
        "rss_mb": {name: rss_mb(p) for name, p in processes.items()},
    }
