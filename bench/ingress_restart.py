"""The ingress restarted under clients' calls: threads of the Python client
call Recommend through Envoy while Envoy is SIGKILLed once (the runner
brings it back), and what they saw is counted. Side by side in one run:
the client's defaults (a read waits for the connection within its
deadline, reconnecting after 100 ms, 100 retry tokens) and the clients
before (failing fast, gRPC's own reconnect backoff, 10 tokens). The runner
stops the stack after 5 restarts of one component in 10 minutes: at most
two rounds."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from typing import Any

from bench.chaos import candidates
from bench.load import wait_for_full_answer
from recserve_stack.probes import wait_until

SETTINGS: dict[str, dict[str, Any]] = {
    "waits for the connection (default)": {},
    "before: fails fast, gRPC's backoff, 10 tokens": {
        "wait_for_ready": False,
        "reconnect_backoff_s": 1.0,
        "max_reconnect_backoff_s": 120.0,
        "retry_throttle_max_tokens": 10,
    },
}


def _calls(client: Any, n: int, stop: float, seen: dict[str, Any], kill: list[float]) -> None:
    """One thread's calls until ``stop``: answers and errors, timed from the kill."""
    i = 0
    while time.monotonic() < stop:
        started = time.monotonic()
        try:
            client.recommend(str(1 + (n * 13 + i) % 900), k=10)
            seen["answered"] += 1
            seen["max_s"] = max(seen["max_s"], time.monotonic() - started)
        except Exception as error:  # every failure is the finding
            seen["errors"][getattr(error, "code", type(error).__name__)] += 1
            seen["messages"][str(error)[:120]] += 1
            if kill:
                seen["error_at"].append(started - kill[0])
        i += 1


def run_once(target: str, name: str, threads: int, duration_s: float) -> dict[str, Any]:
    from recserve_client import ClientOptions, RecserveClient, RetryPolicy

    seen: dict[str, Any] = {
        "answered": 0, "max_s": 0.0, "errors": Counter(), "messages": Counter(), "error_at": [],
    }  # fmt: skip
    kill: list[float] = []
    stop = time.monotonic() + duration_s
    settings = dict(SETTINGS[name])
    tokens = settings.pop("retry_throttle_max_tokens", None)
    if tokens is not None:
        settings["retry"] = RetryPolicy(throttle_max_tokens=tokens)
    with RecserveClient(target, ClientOptions(**settings)) as client:
        workers = [
            threading.Thread(target=_calls, args=(client, n, stop, seen, kill))
            for n in range(threads)
        ]
        for worker in workers:
            worker.start()
        # Calls under way (answered) before the kill.
        wait_until(lambda: seen["answered"] >= 10 * threads, duration_s, "answers before the kill")
        (envoy,) = candidates("envoy")
        kill.append(time.monotonic())
        os.kill(envoy.pid, signal.SIGKILL)
        for worker in workers:
            worker.join()
    at = seen["error_at"]
    return {
        "setting": name,
        "answered": seen["answered"],
        "errors": dict(seen["errors"]),
        "errors_from_s": round(min(at), 3) if at else None,
        "errors_until_s": round(max(at), 3) if at else None,
        "slowest_answer_ms": round(seen["max_s"] * 1000, 1),
        "messages": dict(seen["messages"]),
    }


def run(target: str, threads: int, duration_s: float, rounds: int) -> list[dict[str, Any]]:
    """Each setting once a round, in turn (the other first in even rounds)."""
    rows = []
    for round_ in range(rounds):
        names = list(SETTINGS) if round_ % 2 == 0 else list(reversed(SETTINGS))
        for name in names:
            wait_for_full_answer(target)  # Envoy back and serving
            rows.append({"round": round_ + 1, **run_once(target, name, threads, duration_s)})
    return rows
