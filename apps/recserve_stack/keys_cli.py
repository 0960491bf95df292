"""`python -m recserve_stack keys ...`: the stack's admin and app tokens,
their key set (rotate, revoke, list) and its certificates.

`keys AUTH_DIR [--tls-dir ...]` (the runner's start, Compose's init, the
Kubernetes init Job) is `keys ensure`: it makes what is missing and renews
what is due. Rotation needs no downtime: the new tokens are signed by a key
published one rotation ahead, and the old tokens work until their key is
revoked."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from typer.core import TyperGroup

from recserve_cli import console as cli_console
from recserve_kit.config import load_settings
from recserve_stack import auth, pki
from recserve_stack.settings import StackSettings

RESTART_ENVOY = (
    "Envoy reads jwks.json only at start: restart it before the next rotation, so that it "
    "trusts the key that one signs with ({next}): `make run` stopped and started again; "
    "`docker compose restart envoy`; `kubectl -n recserve rollout restart deployment/envoy`."
)
# Envoy reports its uptime in whole seconds: a start within this of a key's
# publication is not taken as after it.
UPTIME_RESOLUTION_S = 1.0


class _EnsureByDefault(TyperGroup):
    """`keys AUTH_DIR ...` runs `keys ensure AUTH_DIR ...` (the form the
    init steps call); a subcommand's name runs that subcommand."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["ensure", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(add_completion=False, help=__doc__, no_args_is_help=True, cls=_EnsureByDefault)
console = cli_console()

DataDir = Annotated[
    Path | None,
    typer.Option(
        help="The stack's data directory (keys under <data-dir>/auth); default the stack's."
    ),
]


def _when(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _auth_dir(data_dir: Path | None) -> Path:
    return (data_dir or load_settings(StackSettings).data_dir) / "auth"


def _fail(error: auth.KeySetError) -> typer.Exit:
    console.print(f"[red]{error}[/]", markup=True, highlight=False)
    return typer.Exit(1)


@app.command()
def ensure(
    auth_dir: Annotated[Path, typer.Argument(help="Where the key set and the tokens go.")],
    tls_dir: Annotated[
        Path | None, typer.Option(help="Also the stack's CA and certificates, here.")
    ] = None,
    edge_dir: Annotated[
        Path | None,
        typer.Option(help="Also the TLS listener's pair (tls.crt, tls.key, ca.crt), here."),
    ] = None,
    edge_name: Annotated[
        list[str] | None,
        typer.Option(
            help="A name the edge certificate carries (repeatable), besides localhost, "
            "127.0.0.1 and RECSERVE_STACK_EDGE_NAMES."
        ),
    ] = None,
) -> None:
    """Create the key set (a signing and a next key), JWKS and the admin and
    app tokens, and the stack's certificates, once; renew what is about to
    expire (a token with less than a day left). A directory of one key
    (private.pem) is migrated in place; its tokens stay valid."""
    console.print(f"JWKS: {auth.ensure_keys(auth_dir)}")
    if tls_dir is not None:
        console.print(f"certificates: {pki.ensure_pki(tls_dir)}")
    if edge_dir is not None:
        if tls_dir is None:
            raise typer.BadParameter("--edge-dir needs --tls-dir (the CA that signs it)")
        # Not the host name: a container's changes with each run.
        extra = load_settings(StackSettings).edge_names
        names = list(dict.fromkeys(["localhost", "127.0.0.1", *(edge_name or []), *extra]))
        console.print(f"edge certificate: {pki.ensure_edge(edge_dir, tls_dir, names)}")


def envoy_started(admin_url: str, timeout_s: float = 3.0) -> float | None:
    """When the Envoy behind ``admin_url`` started (its current epoch, which
    is when it last read jwks.json), or None if it does not answer."""
    try:
        with urllib.request.urlopen(f"{admin_url}/server_info", timeout=timeout_s) as reply:
            info: dict[str, Any] = json.loads(reply.read())
        uptime_s = float(str(info["uptime_current_epoch"]).removesuffix("s"))
    except (OSError, ValueError, KeyError):
        return None
    return time.time() - uptime_s


def _envoy_admin(data_dir: Path | None, envoy_admin: str | None) -> str | None:
    """The admin URL of the Envoy that serves this data directory: the one
    given, else the local stack's when the directory is the stack's own."""
    if envoy_admin:
        return envoy_admin.rstrip("/")
    settings = load_settings(StackSettings)
    if data_dir is None or data_dir.resolve() == settings.data_dir.resolve():
        return f"http://{settings.host}:{settings.envoy_admin_port}"
    return None


@app.command()
def rotate(
    data_dir: DataDir = None,
    envoy_admin: Annotated[
        str | None,
        typer.Option(
            help="Envoy's admin URL, to check it already trusts the key this rotation signs "
            "with; default the local stack's, for its own data directory."
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Rotate even if that Envoy started before the key was published.")
    ] = False,
) -> None:
    """Sign with the next key from now on: mint admin.token and app.token
    again with it (the old ones keep working until `keys revoke`), and
    publish a new next key in jwks.json."""
    auth_dir = _auth_dir(data_dir)
    try:
        keys = auth.open_key_set(auth_dir)
    except auth.KeySetError as error:
        raise _fail(error) from None
    published = keys.keys[keys.next].published
    admin_url = _envoy_admin(data_dir, envoy_admin)
    started = envoy_started(admin_url) if admin_url else None
    if started is not None and started - UPTIME_RESOLUTION_S < published and not force:
        console.print(
            f"[red]Envoy ({admin_url}) started at {_when(started)}, before {keys.next} was "
            f"published ({_when(published)}): it would refuse the tokens this rotation "
            "mints. Restart Envoy first (`make run` stopped and started again; `docker "
            "compose restart envoy`; `kubectl -n recserve rollout restart deployment/envoy`), "
            "or pass --force.[/]",
            highlight=False,
        )
        raise typer.Exit(1)
    rotation = auth.rotate(auth_dir)
    console.print(
        f"signing with {rotation.signing} (published {_when(published)}); new admin.token and "
        f"app.token in {auth_dir}. {rotation.retired} stays published until `keys revoke "
        f"{rotation.retired}`; {rotation.next} is the next key, published now.",
        highlight=False,
    )
    if started is not None:
        console.print(f"Envoy ({admin_url}) started at {_when(started)}: it trusts the new tokens.")
    else:
        console.print(
            f"Envoy's start time is not known here: it trusts the new tokens if it started "
            f"after {_when(published)}.",
            highlight=False,
        )
    console.print(RESTART_ENVOY.format(next=rotation.next), highlight=False)


@app.command()
def revoke(
    kid: Annotated[
        str | None, typer.Argument(help="The key id (`keys list` shows them).", show_default=False)
    ] = None,
    retired: Annotated[
        bool,
        typer.Option(
            "--retired",
            help="Every key a rotation retired (role old), instead of one KID: what a "
            "scheduled job runs once a rotation's new tokens are handed out.",
        ),
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Drop a key from jwks.json: the services refuse its tokens at once
    (Envoy, which read the file at start, still passes them; the service
    answers UNAUTHENTICATED and does nothing). Not the signing key: rotate
    first. Revoking the next key publishes a new one."""
    if (kid is None) == (not retired):
        raise typer.BadParameter("name one key id, or --retired for every retired key")
    auth_dir = _auth_dir(data_dir)
    try:
        if kid is None:
            kids = auth.revoke_retired(auth_dir)
        else:
            auth.revoke(auth_dir, kid)
            kids = [kid]
        keys = auth.open_key_set(auth_dir)
    except auth.KeySetError as error:
        raise _fail(error) from None
    live = [k for k in keys.keys if keys.keys[k].revoked is None]
    if not kids:
        console.print(f"no retired key to revoke; jwks.json holds {', '.join(live)}.")
        return
    console.print(
        f"revoked {', '.join(kids)}; jwks.json now holds {', '.join(live)}. The services refuse "
        "their tokens from now on (UNAUTHENTICATED); an Envoy that read jwks.json before still "
        "passes them on to be refused there.",
        highlight=False,
    )
    if any(keys.keys[keys.next].published == keys.keys[k].revoked for k in kids):
        console.print(f"{keys.next} is the next key now, published now.", highlight=False)
        console.print(RESTART_ENVOY.format(next=keys.next), highlight=False)


@app.command("list")
def list_keys(data_dir: DataDir = None) -> None:
    """Each key (signing, next, old or revoked) and which key signed each token file."""
    auth_dir = _auth_dir(data_dir)
    if not (auth_dir / auth.STATE).exists() and (auth_dir / auth.LEGACY_KEY).exists():
        console.print(
            f"{auth_dir} holds one key ({auth.LEGACY_KEY}, kid {auth.LEGACY_KID}), made before "
            f"key generations: `keys {auth_dir}` (or the stack's start) migrates it in place.",
            highlight=False,
        )
        raise typer.Exit(0)
    try:
        keys = auth.open_key_set(auth_dir)
    except auth.KeySetError as error:
        raise _fail(error) from None
    table = Table(title=f"keys in {auth_dir}", title_justify="left")
    for column in ("kid", "role", "published", "revoked"):
        table.add_column(column)
    for kid, record in keys.keys.items():
        revoked = _when(record.revoked) if record.revoked is not None else ""
        table.add_row(kid, keys.role(kid), _when(record.published), revoked)
    console.print(table)
    tokens = Table(title="tokens", title_justify="left")
    for column in ("file", "kid", "expires"):
        tokens.add_column(column)
    for name in auth.TOKENS:
        path = auth_dir / name
        if not path.exists():
            tokens.add_row(name, "(missing)", "")
            continue
        info = auth.token_info(path)
        role = keys.role(info.kid) if info.kid in keys.keys else "unknown"
        days = (info.expires - time.time()) / 86400
        tokens.add_row(name, f"{info.kid} ({role})", f"{_when(info.expires)} ({days:.1f} days)")
    console.print(tokens)
