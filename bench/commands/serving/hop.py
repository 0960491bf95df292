"""`python -m bench hop`: its options, its table and its JSON record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bench.output import console, write


def hop(
    data_dir: Annotated[Path, typer.Option(help="A data dir with built artifacts.")] = Path("data"),
    service: Annotated[str, typer.Option(help="Whose health check to call.")] = "features",
    address: str = "127.0.0.1:50052",
    triton_url: str = "127.0.0.1:8001",
    calls: int = 4000,
    tls: Annotated[
        bool, typer.Option(help="Call with <data-dir>/tls/operator.pem (the stack's default).")
    ] = True,
    pace_ms: Annotated[
        float,
        typer.Option(
            help="Unary vs frame rows: one call at a time, this pause between; 0: 8 at once."
        ),
    ] = 0.0,
    out: Path | None = None,
) -> None:
    """CPU floor of one gRPC hop and one Triton call, against the running stack."""
    from bench.hop_cost import run as run_hop
    from recserve_kit.transport import Tls
    from recserve_model import artifacts
    from recserve_model.encoding import EncodingSpec

    spec = EncodingSpec.load(artifacts.current(data_dir) / "encoding.json")
    operator = Tls.load(data_dir / "tls", "operator") if tls else None
    result = run_hop(address, service, triton_url, spec.user_dim, calls, operator, pace_ms)
    table = Table(title=f"CPU per call that does no work ({calls:,} calls, 8 at a time)")
    for column in ("hop", "server us", "client us", "total us", "calls/s"):
        table.add_column(column, justify="left" if column == "hop" else "right")
    for name in ("service_hop", "features_unary", "features_frame", "triton_hop"):
        row = result[name]
        assert isinstance(row, dict)
        table.add_row(
            name, *(str(row[k]) for k in ("server_us", "client_us", "total_us", "calls_per_s"))
        )
    console.print(table)
    console.print(
        f"floor per Recommend (4 service calls + 2 Triton calls): "
        f"{result['floor_cpu_ms_per_recommend']} ms of CPU"
    )
    write(out, {"benchmark": "hop_cost", **result})
