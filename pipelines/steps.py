"""Each step of a long job as one log line with its duration, also when the
output is not a terminal (a build's log under a scheduler): where the time
went, and which step a job that seems stuck is in."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console


class Steps:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.durations: dict[str, float] = {}
        self._open: tuple[str, float] | None = None

    def start(self, name: str) -> None:
        """Ends the open step, if any, and starts ``name``."""
        self.stop()
        self.console.print(f"step {name} ...", highlight=False)
        self._open = (name, time.perf_counter())

    def stop(self) -> None:
        if self._open is None:
            return
        name, started = self._open
        self._open = None
        seconds = time.perf_counter() - started
        self.durations[name] = round(seconds, 2)
        self.console.print(f"step {name}: {seconds:.1f} s", highlight=False)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.start(name)
        try:
            yield
        finally:
            self.stop()
