"""Starts components as child processes, waits for each to be ready, and
stops them all, leaving nothing behind.

Each component runs in its own process group (so a stop reaches its children,
such as Triton's python-backend stubs) and asks the kernel to signal it if
the runner dies. Log lines are prefixed with the component's name and kept in
``<data_dir>/logs/<name>.log``; the tail of a failed component is shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any, TextIO

ReadyCheck = Callable[[], Awaitable[bool]]

# The kernel signals each component if the runner dies (PR_SET_PDEATHSIG),
# set by util-linux's setpriv before the component is exec'd. Not a
# preexec_fn: Python code between fork and exec can deadlock the runner when
# another of its threads holds a lock at fork time (it did: a stack hung
# spawning its last component, and its services outlived the test). The sh
# step closes the remaining race: a runner that died before the signal was
# armed is no longer the parent, and the component is not started.
_WATCH_PARENT = '[ "$PPID" = "$RECSERVE_RUNNER_PID" ] || exit 70; exec "$@"'

LOG_MAX_BYTES = 64 << 20  # each component's log, in <data_dir>/logs
EXIT_POLL_S = 0.1  # how often supervision looks for a component's exit code


def _with_parent_death_signal(argv: list[str], signal_name: str = "TERM") -> list[str]:
    if not shutil.which("setpriv"):
        return argv
    return ["setpriv", "--pdeathsig", signal_name, "--", "sh", "-c", _WATCH_PARENT, "sh", *argv]


@dataclass
class Component:
    name: str
    argv: list[str]
    ready: ReadyCheck
    env: dict[str, str] | None = None
    cwd: Path | None = None
    address: str = ""
    # Started only once these components are ready (Compose's depends_on:
    # service_healthy), so a client never dials a backend that is not up.
    after: tuple[str, ...] = ()
    # How it is stopped, by the runner's stop or by the kernel when the
    # runner dies. TERM lets it stop gracefully. KILL where its own SIGTERM
    # handling can hang and it keeps nothing (Triton's): the runner's stop
    # kills it once the others are down, so nothing is still calling it.
    stop_signal: str = "TERM"
    # Removes what the component leaves behind when it is killed (Triton's
    # shared memory); run before each start and once the stack has stopped.
    leftovers: Callable[[], object] | None = None
    process: asyncio.subprocess.Process | None = field(default=None, repr=False)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=30), repr=False)


class ComponentFailed(RuntimeError):
    def __init__(self, name: str, reason: str, tail: Sequence[str]) -> None:
        super().__init__(f"{name} {reason}")
        self.component = name
        self.reason = reason
        self.tail = list(tail)


def rotating_log(path: Path, max_bytes: int) -> RotatingFileHandler:
    """A component's log file: past ``max_bytes`` it becomes ``<name>.log.1``
    (the one before is removed), so a log takes at most twice that."""
    handler = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=1, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler


class Runner:
    def __init__(
        self,
        components: Sequence[Component],
        log_dir: Path,
        out: TextIO = sys.stdout,
        start_timeout_s: float = 120.0,
        stop_timeout_s: float = 15.0,
        log_max_bytes: int = LOG_MAX_BYTES,
    ) -> None:
        self.components = list(components)
        self.log_dir = log_dir
        self.log_max_bytes = log_max_bytes
        self.out = out
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._pumps: list[asyncio.Task[None]] = []
        self._width = max(len(c.name) for c in self.components)

    def say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    async def start(self) -> None:
        """Spawns every component, then waits until all are ready.

        Raises ComponentFailed naming the first that exits or is not ready in
        time; the caller stops the rest.
        """
        self.log_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.start_timeout_s
        pending = {c.name: c for c in self.components}
        while pending:
            for name, component in list(pending.items()):
                if component.process is None:
                    if any(dep in pending for dep in component.after):
                        continue
                    await self._spawn(component)
                self._raise_if_exited(component)
                if await self._probe(component):
                    self.say(f"{name:>{self._width}} | ready {component.address}".rstrip())
                    del pending[name]
            if pending and time.monotonic() > deadline:
                name, component = next(iter(pending.items()))
                raise ComponentFailed(
                    name, f"not ready after {self.start_timeout_s:.0f}s", component.tail
                )
            if pending:
                await asyncio.sleep(0.2)

    def _raise_if_exited(self, component: Component) -> None:
        process = component.process
        if process is not None and process.returncode is not None:
            raise ComponentFailed(
                component.name, f"exited with code {process.returncode}", component.tail
            )

    async def _spawn(self, component: Component) -> None:
        env = dict(component.env if component.env is not None else os.environ)
        env["RECSERVE_RUNNER_PID"] = str(os.getpid())
        if component.leftovers is not None:
            component.leftovers()
        component.process = await asyncio.create_subprocess_exec(
            *_with_parent_death_signal(component.argv, component.stop_signal),
            env=env,
            cwd=component.cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group, reached by stop()
        )
        self._pumps.append(asyncio.create_task(self._pump(component)))

    async def _pump(self, component: Component) -> None:
        assert component.process is not None and component.process.stdout is not None
        prefix = f"{component.name:>{self._width}} | "
        log = rotating_log(self.log_dir / f"{component.name}.log", self.log_max_bytes)
        try:
            async for raw in component.process.stdout:
                line = raw.decode("utf-8", "replace").rstrip()
                component.tail.append(line)
                log.handle(logging.makeLogRecord({"msg": line, "levelno": logging.INFO}))
                self.say(prefix + line)
        finally:
            log.close()

    async def supervise(self, max_restarts: int = 5, window_s: float = 600.0) -> Component:
        """Restarts a component that exits (as Compose's ``restart:
        unless-stopped``) while the others keep serving (their health and the
        gateway's fallback cover the gap). Each component comes back on its
        own: one that dies while another is still getting ready is restarted
        at once, not after it. Returns the component that exited more than
        ``max_restarts`` times within ``window_s`` (a kill before it was
        ready again counts as one more exit) or stayed up without getting
        ready within the start timeout: the caller stops the stack then."""
        restarts: dict[str, deque[float]] = {}
        # A component's exit (its process's wait), or its comeback (True: ready again).
        exits: dict[asyncio.Task[Any], Component] = {
            self._exit_of(c): c for c in self.components if c.process
        }
        comebacks: dict[asyncio.Task[Any], Component] = {}
        try:
            while True:
                done, _ = await asyncio.wait(
                    {*exits, *comebacks}, return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    if task in comebacks:
                        component = comebacks.pop(task)
                        if task.result():
                            back = (
                                f"{component.name:>{self._width}} | ready again {component.address}"
                            )
                            self.say(back.rstrip())
                            exits[self._exit_of(component)] = component
                            continue
                        if not self._exited_again(component):
                            return component  # alive but never ready: a hang, not a crash
                    else:
                        component = exits.pop(task)
                    if not self._may_restart(component, restarts, max_restarts, window_s):
                        return component
                    comebacks[asyncio.create_task(self._restart(component))] = component
        finally:
            for task in (*exits, *comebacks):
                task.cancel()

    @staticmethod
    def _exited_again(component: Component) -> bool:
        """Whether a comeback failed because the component exited (killed
        again before it was seen ready, as a crash loop or a second kill
        would): that is one more exit, under the same restart limit."""
        return component.process is not None and component.process.returncode is not None

    @staticmethod
    def _exit_of(component: Component) -> asyncio.Task[int]:
        return asyncio.create_task(Runner._exited(component))

    @staticmethod
    async def _exited(component: Component) -> int:
        """The component's exit code once its process has exited. Not
        ``process.wait()``: that also waits until every holder of its stdout
        has closed it, and Triton's python-backend stubs outlive a killed
        Triton (its restart waited on them, for minutes on a busy host)."""
        process = component.process
        assert process is not None
        while process.returncode is None:
            await asyncio.sleep(EXIT_POLL_S)
        return process.returncode

    def _may_restart(
        self,
        component: Component,
        restarts: dict[str, deque[float]],
        max_restarts: int,
        window_s: float,
    ) -> bool:
        """Counts the restart, saying so; False past ``max_restarts`` in ``window_s``."""
        assert component.process is not None
        recent = restarts.setdefault(component.name, deque())
        now = time.monotonic()
        while recent and now - recent[0] > window_s:
            recent.popleft()
        if len(recent) >= max_restarts:
            return False
        recent.append(now)
        self.say(
            f"{component.name:>{self._width}} | exited with code {component.process.returncode}; "
            f"restarting ({len(recent)} of {max_restarts} in {window_s:.0f}s)"
        )
        return True

    async def _restart(self, component: Component) -> bool:
        self._signal(component, signal.SIGKILL)  # children the leader left behind
        await self._spawn(component)
        return await self._ready_again(component)

    async def _ready_again(self, component: Component) -> bool:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            assert component.process is not None
            if component.process.returncode is not None:
                return False
            if await self._probe(component):
                return True
            await asyncio.sleep(0.2)
        return False

    @staticmethod
    async def _probe(component: Component) -> bool:
        """One readiness check, at most 2 s; an unreachable component is not ready."""
        try:
            return await asyncio.wait_for(component.ready(), 2.0)
        except (TimeoutError, OSError):
            return False

    async def stop(self) -> None:
        """SIGTERM in reverse start order, then SIGKILL whatever outlives the
        grace, and those stopped by KILL."""
        running = [
            c
            for c in reversed(self.components)
            if c.process and c.process.returncode is None and c.stop_signal != "KILL"
        ]
        for component in running:
            self._signal(component, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        for component in running:
            assert component.process is not None
            try:
                await asyncio.wait_for(
                    component.process.wait(), max(0.1, deadline - time.monotonic())
                )
            except TimeoutError:
                self.say(f"{component.name:>{self._width}} | did not stop in time, killing")
        for component in self.components:
            # The group may hold children even after the leader exited.
            self._signal(component, signal.SIGKILL)
            if component.process and component.process.returncode is None:
                await component.process.wait()
            if component.process and component.leftovers is not None:
                component.leftovers()
        for pump in self._pumps:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(pump, 2.0)

    @staticmethod
    def _signal(component: Component, signum: int) -> None:
        if component.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(component.process.pid, signum)
