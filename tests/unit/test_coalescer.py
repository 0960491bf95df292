"""The ranker's adaptive window: a Score that finds its model version's
calls all running waits and goes merged with the others that came
meanwhile; an idle one goes at once; each gets its own rows back, a
failure reaches every member, and a waiter's deadline is its own."""

import asyncio

import numpy as np
import pytest

from recserve_kit.errors import Unavailable
from services.ranker.coalescer import Coalescer


class FakeTriton:
    """Scores each row with the sum of its features; each call takes ``delay_s``."""

    def __init__(self, delay_s: float = 0.05, fail: bool = False) -> None:
        self.calls: list[int] = []  # rows per call
        self.delay_s = delay_s
        self.fail = fail

    async def send(self, inputs, timeout_s, track):
        self.calls.append(len(inputs[0][1]))
        if track is not None:
            track(asyncio.get_running_loop().create_future())
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise Unavailable("Triton did not answer")
        return inputs[0][1].sum(axis=1, keepdims=True)


def rows(value: float, n: int = 3):
    return [("item_features", np.full((n, 2), value, dtype=np.float32))]


async def test_an_idle_model_is_called_at_once_and_a_busy_one_takes_the_queue_in_one_call():
    triton, coalescer = FakeTriton(), Coalescer(in_flight=1, max_rows=4096)
    first = asyncio.create_task(coalescer.infer("ranker@1", triton.send, rows(1.0), 1.0))
    await asyncio.sleep(0.01)  # the first is running now
    later = [
        asyncio.create_task(coalescer.infer("ranker@1", triton.send, rows(float(v)), 1.0))
        for v in (2, 3, 4)
    ]
    results = await asyncio.gather(first, *later)
    assert triton.calls == [3, 9]  # alone, then the three that waited, merged
    for value, result in zip((1, 2, 3, 4), results, strict=True):
        np.testing.assert_array_equal(result, np.full((3, 1), 2.0 * value))


async def test_versions_do_not_wait_for_each_other_and_batches_stay_within_max_rows():
    triton, coalescer = FakeTriton(), Coalescer(in_flight=1, max_rows=6)
    busy = asyncio.create_task(coalescer.infer("ranker@1", triton.send, rows(1.0), 1.0))
    other = asyncio.create_task(coalescer.infer("ranker@2", triton.send, rows(1.0), 1.0))
    await asyncio.sleep(0.01)
    assert triton.calls == [3, 3]  # another version goes at once
    queued = [
        asyncio.create_task(coalescer.infer("ranker@1", triton.send, rows(1.0), 1.0))
        for _ in range(3)
    ]
    await asyncio.gather(busy, other, *queued)
    assert triton.calls == [3, 3, 6, 3]  # two fit in 6 rows, the third goes next


async def test_a_failure_reaches_every_member_and_a_late_caller_gives_up_alone():
    triton, coalescer = FakeTriton(fail=True), Coalescer(in_flight=1, max_rows=4096)
    first = asyncio.create_task(coalescer.infer("r", triton.send, rows(1.0), 1.0))
    await asyncio.sleep(0.01)
    merged = [asyncio.create_task(coalescer.infer("r", triton.send, rows(2.0), 1.0))]
    for task in (first, *merged):
        with pytest.raises(Unavailable):
            await task
    slow, impatient = FakeTriton(delay_s=0.3), Coalescer(in_flight=1, max_rows=4096)
    running = asyncio.create_task(impatient.infer("r", slow.send, rows(1.0), 2.0))
    await asyncio.sleep(0.01)
    with pytest.raises(Unavailable):
        await impatient.infer("r", slow.send, rows(2.0), 0.01)  # its own short deadline
    np.testing.assert_array_equal(await running, np.full((3, 1), 2.0))
    assert slow.calls == [3]  # the caller that gave up was left out of the next batch


async def test_each_member_is_judged_by_its_own_outcome_and_wait():
    """The rollout judge's figures: each Score timed from when it queued, a
    caller whose deadline passed in the queue counted as failed."""
    # "a" runs 0.5 s: longer than "late" waits (its 0.02 s deadline and the grace).
    triton, coalescer = FakeTriton(delay_s=0.5), Coalescer(in_flight=1, max_rows=4096)
    outcomes: dict[str, str] = {}

    def tracker(name):
        def track(call):
            call.add_done_callback(
                lambda f: outcomes.__setitem__(
                    name, "failed" if f.cancelled() or f.exception() else "completed"
                )
            )

        return track

    first = asyncio.create_task(coalescer.infer("r", triton.send, rows(1.0), 1.0, tracker("a")))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(coalescer.infer("r", triton.send, rows(1.0), 1.0, tracker("b")))
    with pytest.raises(Unavailable):  # gives up while "a" runs
        await coalescer.infer("r", triton.send, rows(1.0), 0.02, tracker("late"))
    await asyncio.sleep(0)  # done callbacks run on the next turn of the loop
    assert outcomes == {"late": "failed"}
    await asyncio.gather(first, waiting)
    assert outcomes == {"a": "completed", "b": "completed", "late": "failed"}
    assert triton.calls == [3, 3]  # "late" left out of the second call
