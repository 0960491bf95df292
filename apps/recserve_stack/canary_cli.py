"""`python -m recserve_stack canary ...`: a new gateway build behind Envoy's
``gateway_canary`` cluster, moved in steps and judged like a model rollout
(recserve_stack.service_canary). `start` runs the controller in the
foreground until the canary is promoted, rolled back or aborted; the other
commands work from any shell."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from recserve.ranker.v1 import ranker_pb2 as pb
from recserve_delivery.rollout import Plan, Rollout
from recserve_delivery.state import Triggers
from recserve_delivery.status import status_message
from recserve_kit.config import load_settings
from recserve_kit.errors import RecserveError
from recserve_stack.rollout_cli import add_actions, console, show
from recserve_stack.service_canary import CANARY, NAME, EnvoyAdmin, ServiceCanary, weights
from recserve_stack.settings import StackSettings

app = typer.Typer(add_completion=False, help=__doc__, no_args_is_help=True)


def _rollout(settings: StackSettings) -> Rollout:
    return Rollout(settings.data_dir, "gateway", name=NAME, metrics_prefix="recserve_canary")


def _admin(settings: StackSettings) -> EnvoyAdmin:
    return EnvoyAdmin(f"http://{settings.host}:{settings.envoy_admin_port}")


def _watch(canary: ServiceCanary, interval_s: float) -> None:
    """Judge until the canary is finished; each decision is printed as made."""
    seen = len(canary.state.history)
    while True:
        status = canary.tick()
        for d in canary.state.history[seen:]:
            console.print(f"{d.action} at {d.share_percent:g}%: {d.reason}")
        seen = len(canary.state.history)
        if status not in ("running", "paused"):
            show(status_message(canary.rollout), title="canary")
            return
        time.sleep(interval_s)


@app.command()
def start(
    build: Annotated[str, typer.Argument(help="A name for the canary's build (shown in status).")],
    steps: Annotated[str, typer.Option(help="Comma-separated percents; default 5,25,50,100.")] = "",
    soak_s: Annotated[float, typer.Option(min=0)] = 60.0,
    min_requests: Annotated[int, typer.Option(min=1)] = 50,
    mirror_percent: Annotated[float, typer.Option(min=0, max=100)] = 0.0,
    max_p99_ms: Annotated[float, typer.Option(min=1)] = 150.0,
    max_error_rate: Annotated[float, typer.Option(min=0, max=1)] = 0.005,
    interval_s: Annotated[float, typer.Option(min=0.1)] = 1.0,
) -> None:
    """Send a share of requests (and a mirrored share) to the canary gateway."""
    settings = load_settings(StackSettings)
    canary = ServiceCanary(_admin(settings), _rollout(settings))
    plan = Plan(
        candidate=f"{CANARY}:{build}",
        steps_percent=[float(s) for s in steps.split(",") if s.strip()] or [5, 25, 50, 100],
        soak_s=soak_s,
        min_requests=min_requests,
        shadow_percent=mirror_percent,
        triggers=Triggers(max_p99_ms=max_p99_ms, max_error_rate=max_error_rate),
    )
    try:
        canary.start(plan)
    except RecserveError as refused:
        console.print(f"[red]{refused}[/]")
        raise typer.Exit(1) from None
    _watch(canary, interval_s)


@app.command()
def watch(interval_s: Annotated[float, typer.Option(min=0.1)] = 1.0) -> None:
    """Resume judging a canary whose controller stopped (its step starts over)."""
    settings = load_settings(StackSettings)
    canary = ServiceCanary(_admin(settings), _rollout(settings))
    if canary.state.active:
        canary.resume_watch()
    _watch(canary, interval_s)


@app.command()
def status() -> None:
    """The canary's state, and the weights Envoy applies now."""
    settings = load_settings(StackSettings)
    rollout = _rollout(settings)
    show(status_message(rollout), title="canary")
    runtime = _admin(settings).runtime()
    applied = {k: runtime.get(k, "(unset)") for k in weights(rollout.state)}
    console.print(f"Envoy runtime: {applied}")


def _act(name: str) -> pb.RolloutStatus:
    settings = load_settings(StackSettings)
    canary = ServiceCanary(_admin(settings), _rollout(settings))
    try:
        if name == "abort":
            canary.abort()
        else:
            getattr(canary.rollout, name)()
    except RecserveError as refused:
        console.print(f"[red]{refused}[/]")
        raise typer.Exit(1) from None
    canary.apply()  # at once; a running controller reads the file too
    return status_message(canary.rollout)


add_actions(
    app,
    _act,
    {
        "pause": "Hold the current step (rollback triggers still apply).",
        "resume": "Continue a paused canary (its step's soak starts over).",
        "promote": "The next step now; past the last, every request goes to the canary.",
        "abort": "Every request back on the stable gateways, in any state (undoes a promotion).",
    },
    title="canary",
)


@app.command()
def reset() -> None:
    """Every request to the gateway cluster again and a clean state, in any
    state: after a promoted canary's build is deployed as the gateway, or
    after a controller stopped part way (a canary in progress is aborted)."""
    settings = load_settings(StackSettings)
    canary = ServiceCanary(_admin(settings), _rollout(settings))
    canary.reset()
    show(status_message(canary.rollout), title="canary")
