"""`python -m bench answers`: its options, its table and its JSON record."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from bench.output import console


def answers(
    target: Annotated[str, typer.Option(help="Envoy's address.")] = "127.0.0.1:8080",
    users: int = 943,
    out: Annotated[Path, typer.Option(help="Where to write every user's answer.")] = Path(
        "build/bench/answers.json"
    ),
    compare: Annotated[Path | None, typer.Option(help="Another build's answers file.")] = None,
) -> None:
    """Every user's top 20 (ids, scores); with --compare, how many differ."""
    from bench.load import answers as collect

    got = asyncio.run(collect(target, users))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(got))
    if compare is not None:
        other = {u: [tuple(x) for x in v] for u, v in json.loads(compare.read_text()).items()}
        ids_differ = sum(1 for u in got if [i for i, _ in got[u]] != [i for i, _ in other[u]])
        scores_differ = sum(1 for u in got if got[u] != other[u])
        console.print(
            f"{len(got)} users: ranked ids differ for {ids_differ}, ids or scores "
            f"(to 5 decimals) for {scores_differ}"
        )
