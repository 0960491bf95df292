"""`python -m recserve_stack up`: the whole stack on loopback, until Ctrl-C."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable

import typer
from rich.table import Table

from recserve_cli import console as cli_console
from recserve_kit.config import load_settings
from recserve_stack import envoy, pki
from recserve_stack.backup import backup_command
from recserve_stack.canary_cli import app as canary_app
from recserve_stack.components import stack_components
from recserve_stack.keys_cli import app as keys_app
from recserve_stack.restore import restore_command
from recserve_stack.retention import keep_access_log_bounded
from recserve_stack.retrain import retrain_command
from recserve_stack.rollout_cli import app as rollout_app
from recserve_stack.runner import Component, ComponentFailed, Runner
from recserve_stack.settings import StackSettings

app = typer.Typer(add_completion=False, help=__doc__)
app.add_typer(rollout_app, name="rollout")
app.add_typer(canary_app, name="canary")
app.add_typer(keys_app, name="keys")
app.command("retrain")(retrain_command)
app.command("backup")(backup_command)
app.command("restore")(restore_command)
console = cli_console(stderr=True)

# Called once the stack is ready (make run prints sample recommendations).
AfterReady = Callable[[StackSettings], Awaitable[None]]


def _summary(components: list[Component], settings: StackSettings) -> Table:
    table = Table(title="recserve is up", title_justify="left")
    table.add_column("component")
    table.add_column("address")
    for component in components:
        table.add_row(component.name, component.address)
    if settings.edge_listen_port:
        # What app backends on other hosts call, and the CA their clients trust.
        edge = f"{settings.edge_listen_host}:{settings.edge_listen_port}"
        table.add_row("envoy TLS (app backends)", f"{edge}, CA {settings.edge_dir / pki.EDGE_CA}")
    table.add_row("envoy admin", f"http://{settings.host}:{settings.envoy_admin_port}")
    return table


async def run_stack(settings: StackSettings, after_ready: AfterReady | None = None) -> int:
    runner = Runner(
        stack_components(settings),
        settings.data_dir / "logs",
        start_timeout_s=settings.start_timeout_s,
        stop_timeout_s=settings.stop_timeout_s,
        log_max_bytes=settings.log_max_bytes,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    code = 0
    try:
        starting = asyncio.create_task(runner.start())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            starting.cancel()
            console.print("[yellow]stopping before the stack was ready[/]")
            return 130
        starting.result()
        console.print(_summary(runner.components, settings))
        print("recserve stack ready", flush=True)
        if after_ready is not None:
            await after_ready(settings)
        exited = asyncio.create_task(runner.supervise())
        rotating = asyncio.create_task(keep_access_log_bounded(settings))
        await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
        rotating.cancel()
        if exited.done():
            failed = exited.result()
            code = 1
            console.print(f"[red]{failed.name} keeps exiting; stopping the stack[/]")
            console.print("\n".join(failed.tail))
        else:
            exited.cancel()
    except ComponentFailed as failure:
        code = 1
        console.print(f"[red]{failure.component} failed to start: {failure.reason}[/]")
        console.print(f"--- last lines of {failure.component} ---")
        console.print("\n".join(failure.tail), markup=False, highlight=False)
    finally:
        await runner.stop()
        console.print("stack stopped")
    return code


@app.command()
def up(
    demo: bool = typer.Option(False, help="Once ready, show sample answers and commands."),
) -> None:
    """Start Envoy, Triton and the four services; stop them all on Ctrl-C."""
    settings = load_settings(StackSettings)
    after = None
    if demo:
        from recserve_stack.demo import show

        after = show
    sys.exit(asyncio.run(run_stack(settings, after)))


@app.command("check-envoy")
def check_envoy() -> None:
    """Render the Envoy config and run `envoy --mode validate` on it."""
    settings = load_settings(StackSettings)
    path = envoy.write_config(settings)
    result = envoy.validate(path)
    console.print(result.stdout.strip() or result.stderr.strip())
    sys.exit(result.returncode)


@app.command("render-envoy")
def render_envoy(
    check: bool = typer.Option(False, help="Exit 1 if the committed file is stale."),
) -> None:
    """Write infra/compose/envoy.yaml, the Envoy config of the Compose stack,
    and edge-sds.yaml beside it (the TLS listener's certificate files)."""
    files = {
        envoy.COMPOSE_CONFIG: envoy.render_compose(),
        envoy.COMPOSE_SDS_CONFIG: envoy.render_compose_sds(),
    }
    if check:
        stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
        sys.exit(1 if stale else 0)
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        console.print(f"wrote {path}")


if __name__ == "__main__":
    app()
