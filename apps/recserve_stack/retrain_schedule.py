"""`recserve-stack retrain --every-day-at HH:MM`: the nightly cycle, for a
process that stays up (the local runner's `retrain` component when
RECSERVE_STACK_RETRAIN_AT is set, Compose's `retrain` service).
Kubernetes runs one cycle per CronJob run instead (`retrain` alone): the
same command, scheduled by the cluster.

Each cycle is a process of its own (`retrain` without the schedule): a
cycle that fails or is refused leaves the schedule running and its memory
goes back to the machine; the cycle's lock still refuses a second one at
once (a cycle still running when the next is due, or one started by hand).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from recserve_cli import console as cli_console

DAILY_TIME = r"([01][0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9]))?"  # HH:MM[:SS]
POLL_S = 30.0  # the longest sleep at once: a clock change is noticed within it
console = cli_console()


def parse_daily(at: str) -> tuple[int, int, int]:
    """ "HH:MM" or "HH:MM:SS" (UTC) -> (hour, minute, second); ValueError names it."""
    found = re.fullmatch(DAILY_TIME, at)
    if found is None:
        raise ValueError(f"{at!r} is not a time of day as HH:MM or HH:MM:SS (UTC)")
    return int(found[1]), int(found[2]), int(found[3] or 0)


def next_run(now: datetime, at: str) -> datetime:
    """The first time of day ``at`` strictly after ``now`` (both UTC)."""
    hour, minute, second = parse_daily(at)
    due = now.replace(hour=hour, minute=minute, second=second, microsecond=0)
    return due if due > now else due + timedelta(days=1)


def every_day_at(
    at: str,
    cycle: Sequence[str],
    cycles: int | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Runs the ``cycle`` command every day at ``at``, ``cycles`` times
    (None: until stopped), saying when the next is due and how each ended."""
    parse_daily(at)
    done = 0
    while cycles is None or done < cycles:
        due = next_run(now(), at)
        console.print(f"retrain: the next cycle at {due:%Y-%m-%d %H:%M:%S} UTC")
        while (left := (due - now()).total_seconds()) > 0:
            sleep(min(left, POLL_S))
        code = subprocess.run(list(cycle), check=False).returncode
        console.print(f"retrain: the cycle due at {due:%H:%M:%S} UTC exited with code {code}")
        done += 1
