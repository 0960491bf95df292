"""`python -m recserve_stack rollout ...`: the operator's side of a model
rollout, through Envoy with the admin token (as any admin call)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import grpc
import typer
from google.protobuf.message import Message
from rich.table import Table

from recserve.ranker.v1 import ranker_pb2 as pb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve.retriever.v1 import retriever_pb2 as qpb
from recserve.retriever.v1 import retriever_pb2_grpc
from recserve_cli import console as cli_console
from recserve_delivery import state as rollout_state
from recserve_delivery.experiment import CONFIDENCE, experiment_report
from recserve_kit.config import load_settings
from recserve_model import artifacts
from recserve_stack.rollout_figures import guardrail_evidence, wait_limit_s
from recserve_stack.settings import StackSettings

app = typer.Typer(add_completion=False, help=__doc__, no_args_is_help=True)
console = cli_console()
WAIT_POLL_S = 1.0  # `rollout wait` asks the ranker this often (the judge looks once a second)


@contextmanager
def admin_channel(
    settings: StackSettings | None = None,
) -> Iterator[tuple[grpc.Channel, list[tuple[str, str]]]]:
    """A channel to Envoy and the admin token's metadata."""
    settings = settings or load_settings(StackSettings)
    token = settings.admin_token_path.read_text().strip()
    with grpc.insecure_channel(f"{settings.host}:{settings.envoy_port}") as channel:
        yield channel, [("authorization", f"Bearer {token}")]


def call(method: str, request: Message, settings: StackSettings | None = None) -> pb.RolloutStatus:
    """RankerService/<method> through Envoy, as the admin (raises grpc.RpcError)."""
    with admin_channel(settings) as (channel, metadata):
        stub = ranker_pb2_grpc.RankerServiceStub(channel)
        reply = getattr(stub, method)(request, metadata=metadata, timeout=120)
    status: pb.RolloutStatus = reply.status
    return status


def prepare_items(
    version: str, timeout_s: float, settings: StackSettings | None = None
) -> qpb.PrepareModelVersionResponse:
    """RetrieverService/PrepareModelVersion through Envoy until READY: a
    version with item vectors of its own gets its generation before any user
    is moved to it (raises grpc.RpcError, TimeoutError)."""
    request = qpb.PrepareModelVersionRequest(model_version=version)
    deadline = time.monotonic() + timeout_s
    with admin_channel(settings) as (channel, metadata):
        stub = retriever_pb2_grpc.RetrieverServiceStub(channel)
        while True:
            reply: qpb.PrepareModelVersionResponse = stub.PrepareModelVersion(
                request, metadata=metadata, timeout=30
            )
            if reply.state == qpb.PREPARE_STATE_READY:
                return reply
            if time.monotonic() > deadline:
                raise TimeoutError(f"the retriever is still preparing {version}")
            time.sleep(WAIT_POLL_S)


def prepare_arms(versions: list[str], timeout_s: float) -> None:
    """Every arm's items ready in the retriever (exits on a refusal): at most
    one arm may have item vectors of its own (the retriever holds one
    prepared version beside the current)."""
    for each in versions:
        try:
            prepared = prepare_items(each, timeout_s)
        except grpc.RpcError as exc:
            console.print(f"[red]{exc.code().name}[/]: {exc.details()}")
            sys.exit(1)
        except TimeoutError as exc:
            console.print(f"[red]{exc}[/]")
            sys.exit(1)
        if not prepared.own_generation:
            continue
        console.print(f"{each}'s items: generation {prepared.generation}, ready")
        owners = [v for v in versions if v != each and own_items(v)]
        if owners:
            console.print(
                f"[red]{each} and {owners[0]} both have item vectors of their own: "
                "an experiment may have one such arm[/]"
            )
            sys.exit(1)


def own_items(version: str, settings: StackSettings | None = None) -> bool:
    """Whether ``version``'s item vectors differ from the current artifact's
    (a retrained model: the retriever needs a generation of its own)."""
    data_dir = (settings or load_settings(StackSettings)).data_dir
    root = artifacts.artifacts_root(data_dir)

    current = (root / "CURRENT").read_text().strip()
    return artifacts.read_items_checksum(root / version) != artifacts.read_items_checksum(
        root / current
    )


def _call(method: str, request: Message) -> pb.RolloutStatus:
    try:
        return call(method, request)
    except grpc.RpcError as exc:
        console.print(f"[red]{exc.code().name}[/]: {exc.details()}")
        sys.exit(1)


def utc(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).strftime("%H:%M:%S")


def show(status: pb.RolloutStatus, title: str = "rollout") -> None:
    """The status as a table headed ``<title>: <status>`` (rollout or canary)."""
    table = Table(title=f"{title}: {status.status}", title_justify="left", show_header=False)
    table.add_row("stable", status.stable_version)
    active = status.status in ("running", "paused")
    if active:
        table.add_row("candidate", status.candidate_version)
        for n, more in enumerate(status.more_candidate_versions):
            table.add_row(f"candidate-{n + 2}", more)
        steps = " -> ".join(
            f"[bold]{s:g}%[/]" if n == status.step else f"{s:g}%"
            for n, s in enumerate(status.steps_percent)
        )
        table.add_row("steps", steps)
        each = " each" if status.more_candidate_versions else ""
        table.add_row("on candidate now", f"{status.share_percent:g}% of users{each}")
        if status.experiment_until_unix_s:
            until = status.experiment_until_unix_s
            table.add_row("experiment ends", f"{utc(until)} UTC ({until - time.time():.0f} s)")
        else:
            table.add_row("soak", f"{status.step_elapsed_s:.0f} / {status.soak_s:.0f} s")
        table.add_row("shadow", f"{status.shadow_percent:g}% of stable requests")
        if status.guardrail_decision_by_unix_s:
            by = status.guardrail_decision_by_unix_s
            table.add_row(
                "guardrail decides",
                f"about {utc(by)} UTC ({max(0.0, by - time.time()):.0f} s from now, "
                "at the traffic measured at the start)",
            )
        evidence = guardrail_evidence(status)
        if evidence:
            table.add_row("guardrail evidence", evidence)
    elif status.candidate_version:
        table.add_row("last candidate", status.candidate_version)
    if status.reason:
        table.add_row("reason", status.reason)
    if status.HasField("last_verdict"):
        v = status.last_verdict
        figures = ", ".join(f"{k}={val:.4g}" for k, val in sorted(v.figures.items()))
        table.add_row("judge", f"{v.action}: {v.reason} ({figures})")
    if status.rescoring.run_id:
        r = status.rescoring
        previous = f", rollback to {r.previous_run_id}" if r.previous_run_id else ""
        table.add_row("nightly lists", f"{r.run_id} (published {r.published_at}{previous})")
    console.print(table)
    if status.history:
        history = Table(title="decisions", title_justify="left")
        for column in ("when (UTC)", "action", "share", "reason"):
            history.add_column(column)
        for d in status.history[-10:]:
            history.add_row(utc(d.at_unix_s), d.action, f"{d.share_percent:g}%", d.reason)
        console.print(history)


BaselineRateOption = Annotated[
    float,
    typer.Option(min=0, max=1, help="The stable's conversion: turns the business guardrail on."),
]
MinDropOption = Annotated[
    float,
    typer.Option(min=0, max=1, help="Relative drop the guardrail must rule out; 0: 0.02."),
]
PowerOption = Annotated[
    float, typer.Option(min=0, max=1, help="An experiment's fixed sample; 0: 0.8.")
]
MaxDecisionOption = Annotated[
    float,
    typer.Option(
        min=0, help="Refuse a start whose guardrail would take longer to decide; 0: 7 days."
    ),
]


@app.command()
def start(
    version: Annotated[str, typer.Argument(help="Artifact version in the Triton repository.")],
    steps: Annotated[str, typer.Option(help="Comma-separated percents; default 5,25,50,100.")] = "",
    soak_s: Annotated[float, typer.Option(min=0, help="Per step; 0: the ranker's 60 s.")] = 0,
    min_requests: Annotated[int, typer.Option(min=0, help="Per step; 0: the ranker's 50.")] = 0,
    shadow_percent: Annotated[float, typer.Option(min=0, max=100)] = 0,
    max_p99_ms: Annotated[float, typer.Option(min=0, help="0: 150 ms.")] = 0,
    max_error_rate: Annotated[float, typer.Option(min=0, max=1, help="0: 0.005.")] = 0,
    max_memory_fraction: Annotated[float, typer.Option(min=0, max=1, help="0: 0.85.")] = 0,
    guardrail_baseline_rate: BaselineRateOption = 0,
    guardrail_min_drop: MinDropOption = 0,
    guardrail_alpha: Annotated[float, typer.Option(min=0, max=0.5, help="0: 0.05.")] = 0,
    guardrail_power: PowerOption = 0,
    guardrail_max_decision_s: MaxDecisionOption = 0,
    experiment_s: Annotated[
        float,
        typer.Option(
            min=0,
            help="An A/B experiment for this many seconds at one split (--steps, default 50) "
            "instead of a rollout: never promoted by the judge; `rollout report` at the end.",
        ),
    ] = 0,
    arm: Annotated[
        list[str] | None,
        typer.Option(
            help="An experiment's further arm (repeat it): another version on the next "
            "range of users of the same share."
        ),
    ] = None,
    prepare_timeout_s: Annotated[
        float, typer.Option(min=1, help="Longest wait for the retriever to ready its items.")
    ] = 1800.0,
) -> None:
    """Start moving users to VERSION (or an A/B experiment of it), once the
    retriever has VERSION's items (its own generation, for a retrained model)."""
    more = arm or []
    prepare_arms([version, *more], prepare_timeout_s)
    request = pb.StartRolloutRequest(
        version=version,
        steps_percent=[float(s) for s in steps.split(",") if s.strip()],
        soak_s=soak_s,
        min_requests=min_requests,
        shadow_percent=shadow_percent,
        max_p99_ms=max_p99_ms,
        max_error_rate=max_error_rate,
        max_memory_fraction=max_memory_fraction,
        guardrail_baseline_rate=guardrail_baseline_rate,
        guardrail_min_drop=guardrail_min_drop,
        guardrail_alpha=guardrail_alpha,
        guardrail_power=guardrail_power,
        guardrail_max_decision_s=guardrail_max_decision_s,
        experiment_s=experiment_s,
        more_versions=more,
    )
    show(_call("StartRollout", request))


@app.command()
def status() -> None:
    """Where the rollout stands, the judge's last look, the nightly lists."""
    show(_call("GetRollout", pb.GetRolloutRequest()))


@app.command()
def wait(
    expect: Annotated[
        str, typer.Option(help="Exit 1 unless the rollout ends so: promoted, rolled_back...")
    ] = "",
    timeout_s: Annotated[
        float,
        typer.Option(
            min=0,
            help="0: twice what is left of the guardrail's expected decision and the "
            "steps' soaks, at least 600 s.",
        ),
    ] = 0.0,
) -> None:
    """Until the rollout is no longer running or paused; shows how it ended."""
    try:
        status, timeout_s = until_ended(timeout_s)
    except grpc.RpcError as exc:
        console.print(f"[red]{exc.code().name}[/]: {exc.details()}")
        raise typer.Exit(1) from None
    if status.status in ("running", "paused"):
        show(status)
        console.print(f"[red]still {status.status} after {timeout_s:.0f} s[/]")
        raise typer.Exit(1)
    show(status)
    if expect and status.status != expect:
        console.print(f"[red]the rollout ended {status.status}, not {expect}[/]")
        raise typer.Exit(1)


def until_ended(
    timeout_s: float = 0.0, settings: StackSettings | None = None
) -> tuple[pb.RolloutStatus, float]:
    """The rollout's status once it is no longer running or paused, asking
    the ranker each WAIT_POLL_S (its judge decides once a second), or at
    ``timeout_s`` (0: ``wait_limit_s``) as it then stands; and that limit."""
    status = call("GetRollout", pb.GetRolloutRequest(), settings)
    timeout_s = timeout_s or wait_limit_s(status)
    deadline = time.monotonic() + timeout_s
    while status.status in ("running", "paused") and time.monotonic() <= deadline:
        time.sleep(WAIT_POLL_S)
        status = call("GetRollout", pb.GetRolloutRequest(), settings)
    return status, timeout_s


@app.command()
def report(
    data_dir: Annotated[
        Path | None, typer.Option(help="The stack's data directory; default the stack's.")
    ] = None,
    baseline_rate: Annotated[
        float,
        typer.Option(min=0, max=1, help="Plan the sample from this conversion (no guardrail)."),
    ] = 0,
    out: Annotated[Path | None, typer.Option(help="Also write the report as JSON here.")] = None,
) -> None:
    """The last experiment's (or rollout's) arms from the gateways' logs: the
    candidate against the stable, and whether the planned sample was reached."""
    data_dir = data_dir or load_settings(StackSettings).data_dir
    state = rollout_state.load(data_dir)
    if state is None or not state.candidate:
        console.print("[red]no experiment or rollout has started here[/]")
        raise typer.Exit(1)
    result = experiment_report(data_dir, state, time.time(), baseline_rate)
    table = Table(
        title=f"{result.candidate} against {result.stable}: {result.status}, "
        f"{result.share_percent:g}% of users, {utc(result.started_at)}-{utc(result.ended_at)} UTC",
        title_justify="left",
    )
    for column in ("arm", "version", "lists", "converted", "conversion"):
        table.add_column(column, justify="left" if column in ("arm", "version") else "right")
    for arm, version in result.versions.items():
        cell = result.arms[arm]
        table.add_row(arm, version, str(cell.lists), str(cell.converted), f"{cell.rate:.2%}")
    console.print(table)
    several = len(result.comparisons) > 1
    level = 1 - (1 - CONFIDENCE) / len(result.comparisons)  # Bonferroni's, per comparison
    for arm, c in result.comparisons.items():
        console.print(
            f"{f'{arm}: ' if several else ''}difference {c.difference:+.2%} "
            f"({level * 100:.3g}% interval {c.low:+.2%} to {c.high:+.2%}), "
            f"p {f'= {c.p_value:.3g}' if c.p_value > 0 else '< 1e-15'} (two-sided)"
        )
    if several:
        console.print("each against the stable, Bonferroni-corrected for the arms")
    if result.required_lists is not None:
        reached = "reached" if result.reached else "NOT reached: read the interval, not the p"
        console.print(f"planned sample: {result.required_lists} lists per arm, {reached}")
    if out is not None:
        out.write_text(json.dumps(result.as_dict(), indent=2))


def add_actions(
    cli: typer.Typer,
    act: Callable[[str], pb.RolloutStatus],
    docs: dict[str, str],
    title: str = "rollout",
) -> None:
    """pause, resume, promote and abort as commands of ``cli``: each runs
    ``act(name)`` and shows the status it returns."""

    def command_for(name: str) -> Callable[[], None]:
        def command() -> None:
            show(act(name), title)

        return command

    for name, doc in docs.items():
        cli.command(name, help=doc)(command_for(name))


def _act(name: str) -> pb.RolloutStatus:
    method = f"{name.capitalize()}Rollout"
    return _call(method, getattr(pb, f"{method}Request")())


add_actions(
    app,
    _act,
    {
        "pause": "Hold the current step (rollback triggers still apply).",
        "resume": "Continue a paused rollout (its step's soak starts over).",
        "promote": "The next step now; past the last, the candidate becomes stable.",
        "abort": "Every user back on the stable version.",
    },
)
