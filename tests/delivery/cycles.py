"""Nightly cycles (`recserve-stack retrain`) driven the way a shop lives
them: events through Envoy, the cycle in its own process, simulated users
until it ends."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import grpc

from bench.simulate import Simulation, simulate
from recserve.recommend.v1 import events_pb2 as epb
from recserve.recommend.v1 import events_pb2_grpc
from tests.delivery.traffic import rarely_failed

ROOT = Path(__file__).resolve().parents[2]
# The latency limit is wide: what these cycles judge is what users do; a
# stall of this shared 2-core machine put a CI run's p99 at 345 ms (median
# 3 ms) and rolled back a good model. The trigger has tests of its own.
# Alpha 0.001, not 0.05: a test with two nights that must promote would
# otherwise roll one back by chance in up to one run in ten (a CI run:
# 25 of 34 lists against 35 of 35, p = 0.0276, the arms' shoppers split
# by the version's hash); a candidate they never click on is still
# rolled back at the first look (0 of 30 lists against 20 of 30: p 3e-10).
GUARDED = ["--guardrail-baseline-rate", "0.5", "--guardrail-min-drop", "0.5",
           "--guardrail-alpha", "0.001",
           "--steps", "50,100", "--soak-s", "1", "--min-requests", "5",
           "--max-p99-ms", "5000"]  # fmt: skip

# Lists a second: a steady shop's traffic that leaves the build most of the
# cores (users one after another took one, and doubled the build's time);
# the guardrail plan above decides within tens of seconds at this rate.
USERS_PER_S = 10.0

CYCLES: list[subprocess.Popen[str]] = []


def retrain(stack, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "recserve_stack", "retrain", *args]
    cycle = subprocess.Popen(
        command, env=stack.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    CYCLES.append(cycle)
    return cycle


def newcomer_events(
    stack,
    user: str,
    items: list[str],
    earlier: tuple[str, ...] = (),
    event: tuple[str, float] = ("rating", 4.0),
) -> None:
    """``user`` sends ``event`` on ``items`` now through Envoy, and on
    ``earlier`` an hour ago (early in their history: trained on, not only
    held out)."""
    token = (stack.data_dir / "auth" / "app.token").read_text().strip()
    hour_ago = int(time.time()) - 3600
    event_type, value = event
    batch = [
        epb.AppEvent(event_id=f"{user}-{n}", user_id=user, item_id=item, event_type=event_type,
                     value=value, timestamp=hour_ago if item in earlier else 0)
        for n, item in enumerate([*earlier, *items])
    ]  # fmt: skip
    with grpc.insecure_channel(stack.envoy_address) as channel:
        events = events_pb2_grpc.EventServiceStub(channel)
        metadata = [("authorization", f"Bearer {token}")]
        events.PushEvents(epb.PushEventsRequest(events=batch), metadata=metadata, timeout=10)


def users_until_it_ends(
    stack,
    futures: dict[str, set[str]],
    cycle: subprocess.Popen[str],
    prefer: str = "",
    event: tuple[str, float] = ("rating", 5.0),
    p_noise: float = 0.0,
) -> tuple[Simulation, dict]:
    """Simulated users (clicking on their ``futures`` with ``event``) until
    the cycle ends, and on any other item shown with ``p_noise``; what they
    saw, and the cycle's report. With ``prefer`` they click only on that
    version's lists, on a third of its other items at least: earlier
    cycles' users rated many of their futures, which are then seen and
    never shown again."""
    token = (stack.data_dir / "auth" / "app.token").read_text().strip()
    ended = lambda _: cycle.poll() is not None  # noqa: E731
    noise = max(p_noise, 0.3) if prefer else p_noise
    shown = simulate(
        stack.envoy_address, token, futures, ended, p_noise=noise, max_s=900, prefer=prefer,
        rate=USERS_PER_S, event=event,
    )  # fmt: skip
    output, _ = cycle.communicate(timeout=300)
    assert cycle.returncode == 0, output
    assert rarely_failed(shown), shown.failed
    return shown, json.loads((stack.data_dir / "retrain" / "last.json").read_text())
