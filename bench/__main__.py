"""`python -m bench ...`: benchmarks. Each prints a table and writes JSON."""

from __future__ import annotations

from importlib import import_module

import typer

# Every command, in the order `--help` lists them: name -> "module:function".
# A new benchmark is one line here.
COMMANDS: dict[str, str] = {
    "load": "bench.commands.serving.load:load",
    "idle": "bench.commands.serving.idle:idle",
    "answers": "bench.commands.quality.answers:answers",
    "quality": "bench.commands.quality.quality:quality",
    "baselines": "bench.commands.quality.baselines:baselines_command",
    "learning-curve": "bench.commands.quality.learning_curve:learning_curve",
    "cold-start": "bench.commands.quality.cold_start:cold_start",
    "shop-ceiling": "bench.commands.quality.ceiling:shop_ceiling",
    "simulate": "bench.commands.quality.simulate:simulate",
    "features": "bench.commands.components.features:features",
    "ranker": "bench.commands.components.ranker:ranker",
    "retriever": "bench.commands.components.retriever:retriever",
    "search": "bench.commands.components.search:search",
    "candidates": "bench.commands.components.candidates:candidates",
    "report": "bench.commands.serving.report:report",
    "rescore": "bench.commands.components.rescore:rescore",
    "cpu": "bench.commands.serving.cpu:cpu",
    "events": "bench.commands.serving.events:events",
    "shadow": "bench.commands.components.shadow:shadow",
    "graphs": "bench.commands.components.graphs:graphs",
    "hop": "bench.commands.serving.hop:hop",
    "sweep": "bench.commands.serving.sweep:sweep",
    "burst": "bench.commands.serving.burst:burst",
    "chaos": "bench.commands.serving.chaos:chaos",
    "ingress-restart": "bench.commands.serving.ingress_restart:ingress_restart",
    "capacity": "bench.commands.serving.capacity:capacity",
    "sizing": "bench.sizing:sizing",
}

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


def register(app: typer.Typer, commands: dict[str, str]) -> None:
    """Add each "module:function" to ``app`` under its name."""
    for name, target in commands.items():
        module, function = target.split(":")
        app.command(name)(getattr(import_module(module), function))


register(app, COMMANDS)

if __name__ == "__main__":
    app()
