"""What the command-line tools (the runner, the pipelines, the benchmarks)
share: a console that prints whole lines in a log as on a terminal."""

from __future__ import annotations

import sys

from rich.console import Console

# Without a terminal rich assumes 80 columns and squeezes tables to fit:
# headers become "featu..." and columns vanish, printed commands break.
# There, lines are as wide as their content instead.
LOG_WIDTH = 10_000


def console(stderr: bool = False) -> Console:
    """A rich console for a terminal, or for a pipe or file (a log, CI,
    whatever COLUMNS says there)."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=LOG_WIDTH, soft_wrap=True)
