"""The features service's recompute of users' vectors after events, with
its store, reads and ranker calls replaced (its own logic only: batches,
bounds, failures). On the real stack: tests/e2e (the vector recomputed after
an event)."""

import asyncio

import numpy as np

from services.features import vectors
from services.features.config import FeaturesSettings
from services.features.records import UserRecord
from services.features.vectors import VectorRefresher


class Users:
    def __init__(self, fail_first_read: bool = False) -> None:
        self.fail = fail_first_read
        self.reads: list[list[str]] = []

    def stores_vectors(self) -> bool:
        return True

    def read(self, user_ids):
        self.reads.append(list(user_ids))
        if self.fail:
            self.fail = False
            raise OSError("online store unreachable")
        return [UserRecord(user_id=u, found=True, rating_count=3) for u in user_ids]


class Store:
    def __init__(self) -> None:
        self.pushed: list[str] = []

    def push(self, source, frame, to):
        self.pushed.extend(frame["user_id"])


def refresher(users: Users, store: Store) -> VectorRefresher:
    r = VectorRefresher(store, FeaturesSettings(ranker_addr=""), users)  # type: ignore[arg-type]
    r.channel = object()  # type: ignore[assignment]  # the ranker: _embed below
    return r


async def test_a_failed_batch_is_counted_and_the_next_events_are_still_served():
    users, store = Users(fail_first_read=True), Store()
    r = refresher(users, store)

    async def embed(record):
        return np.ones(4, np.float32), "v1"

    r._embed = embed  # type: ignore[method-assign]
    failed = vectors.WRITTEN.labels("failed")._value.get()
    r.changed(["u1", "u2"])
    await asyncio.wait_for(r.idle.wait(), 5)
    assert vectors.WRITTEN.labels("failed")._value.get() == failed + 2
    assert store.pushed == []
    r.changed(["u3"])
    await asyncio.wait_for(r.idle.wait(), 5)
    assert store.pushed == ["u3"]


async def test_embeds_run_a_few_at_a_time_and_the_queue_is_bounded(monkeypatch):
    monkeypatch.setattr(vectors, "MAX_PENDING", 10)
    users, store = Users(), Store()
    r = refresher(users, store)
    running = peak = 0

    async def embed(record):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return np.ones(4, np.float32), "v1"

    r._embed = embed  # type: ignore[method-assign]
    skipped = vectors.WRITTEN.labels("skipped")._value.get()
    r.changed([f"u{n}" for n in range(25)])
    await asyncio.wait_for(r.idle.wait(), 5)
    assert peak == vectors.CONCURRENT_EMBEDS
    assert store.pushed == [f"u{n}" for n in range(10)]
    assert vectors.WRITTEN.labels("skipped")._value.get() == skipped + 15
