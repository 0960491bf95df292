"""Ranking inferences merged while the model is busy: an adaptive window.

Triton's dynamic batcher waits a fixed window (250 us) for an idle model
instance to gather a batch, and while the instance is busy it queues every
request separately, each paying its own gRPC call, frontend parse and
python stub round trip. Here the ranker merges instead, per model
version: a Score that finds fewer than ``in_flight`` calls of its version
running is sent at once (idle: no window at all); one that finds them all
running waits for the first to finish and goes with every other Score
that arrived meanwhile, as one call of all their rows (up to ``max_rows``).
The wait is as long as the call in flight and no longer, so the window
follows the load: none when idle, about one inference when busy, and the
batches grow with the queue. Each waiter keeps its own deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np
from prometheus_client import Histogram

from recserve_kit.errors import Unavailable

GRACE_S = 0.25
Tensor = tuple[str, np.ndarray]
Track = Callable[[asyncio.Future[object]], None]
Send = Callable[[list[Tensor], float, Track | None], Awaitable[np.ndarray]]

MERGED = Histogram(
    "recserve_ranker_coalesced_requests",
    "Scores merged into one Triton call (the adaptive window's batches).",
    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32),
)


@dataclass
class Waiting:
    inputs: list[Tensor]
    rows: int
    timeout_s: float
    track: Track | None
    result: asyncio.Future[np.ndarray] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@dataclass
class Lane:
    """One model version's calls."""

    running: int = 0
    queue: list[Waiting] = field(default_factory=list)


class Coalescer:
    def __init__(self, in_flight: int, max_rows: int) -> None:
        self.in_flight = in_flight
        self.max_rows = max_rows
        self.lanes: dict[object, Lane] = {}

    async def infer(
        self,
        key: object,
        send: Send,
        inputs: list[Tensor],
        timeout_s: float,
        track: Track | None = None,
    ) -> np.ndarray:
        """``send(inputs, timeout_s, track)`` for these rows, alone or merged."""
        lane = self.lanes.setdefault(key, Lane())
        waiting = Waiting(inputs, len(inputs[0][1]), timeout_s, track)
        if track is not None:
            # The judge sees each Score as its caller does: timed from here
            # (its wait in the queue included), failed when its own deadline
            # passed (the future is cancelled below), not the merged call's.
            track(cast("asyncio.Future[object]", waiting.result))
        lane.queue.append(waiting)
        if lane.running < self.in_flight:
            self._launch(lane, send)
        try:
            # As the Triton client's own wait: the deadline, with room for loop lag.
            return await asyncio.wait_for(asyncio.shield(waiting.result), timeout_s + GRACE_S)
        except TimeoutError:
            raise Unavailable("Triton did not answer within the deadline") from None
        finally:
            waiting.result.cancel()  # done either way: a batch still to go leaves it out

    def _launch(self, lane: Lane, send: Send) -> None:
        batch: list[Waiting] = []
        rows = 0
        while lane.queue and (not batch or rows + lane.queue[0].rows <= self.max_rows):
            waiting = lane.queue.pop(0)
            if waiting.result.done():  # its caller gave up while it waited
                continue
            batch.append(waiting)
            rows += waiting.rows
        if not batch:
            return
        lane.running += 1
        MERGED.observe(len(batch))
        task = asyncio.ensure_future(self._run(batch, send))
        task.add_done_callback(lambda _: self._finished(lane, send))

    def _finished(self, lane: Lane, send: Send) -> None:
        lane.running -= 1
        if lane.queue:
            self._launch(lane, send)

    async def _run(self, batch: list[Waiting], send: Send) -> None:
        inputs = [
            (name, np.concatenate([w.inputs[n][1] for w in batch]))
            for n, (name, _) in enumerate(batch[0].inputs)
        ]
        try:
            out = await send(inputs, max(w.timeout_s for w in batch), None)
        except Exception as exc:  # every waiter gets the call's failure
            for w in batch:
                if not w.result.done():
                    w.result.set_exception(exc)
            return
        start = 0
        for w in batch:
            if not w.result.done():
                w.result.set_result(out[start : start + w.rows])
            start += w.rows
