"""The features service's recompute of users' vectors after events, with
its store and ranker calls replaced (its own logic only: batches, bounds,
failures, the newest activity). On the real stack: tests/e2e (the vector
recomputed after an event) and tests/integration/test_features.py."""

import asyncio

import numpy as np

from recserve.ranker.v1 import ranker_pb2 as rpb
from services.features import vectors
from services.features.config import FeaturesSettings
from services.features.vectors import VectorRefresher


class View:
    """One online view: profiles read, vectors written."""

    def __init__(self, fail_first_read: bool = False) -> None:
        self.fail = fail_first_read
        self.written: list[str] = []

    def read(self, user_ids):
        if self.fail:
            self.fail = False
            raise OSError("online store unreachable")
        return [{"age": 30, "gender": "F", "occupation": "", "attributes": ""} for _ in user_ids]

    def write(self, rows, at):
        self.written.extend(rows)


class Users:
    def __init__(self, fail_first_read: bool = False) -> None:
        self.profile = View(fail_first_read)
        self.vectors = View()

    def stores_vectors(self) -> bool:
        return True


def activity(count: int) -> dict[str, object]:
    return {"rating_count": count, "mean_rating": 4.0, "recent_item_ids": ["1"]}


def refresher(users: Users) -> tuple[VectorRefresher, list[list[tuple[str, int]]]]:
    """The refresher, with the ranker's EmbedUsers replaced: each call's
    (user, rating count) pairs are recorded."""
    r = VectorRefresher(FeaturesSettings(ranker_addr=""), users)  # type: ignore[arg-type]
    r.channel = object()  # type: ignore[assignment]
    calls: list[list[tuple[str, int]]] = []

    async def embed(records):
        calls.append([(u.user_id, u.rating_count) for u in records])
        await asyncio.sleep(0.01)
        vector = np.ones(4, "<f4").tobytes()
        return [rpb.EmbeddedUser(user_id=u.user_id, vector_f32=vector, model_version="v1")
                for u in records]  # fmt: skip

    r._embed = embed  # type: ignore[method-assign]
    return r, calls


async def test_a_failed_batch_is_counted_and_the_next_events_are_still_served():
    users = Users(fail_first_read=True)
    r, _ = refresher(users)
    failed = vectors.WRITTEN.labels("failed")._value.get()
    r.changed({"u1": activity(1), "u2": activity(1)})
    await asyncio.wait_for(r.idle.wait(), 5)
    assert vectors.WRITTEN.labels("failed")._value.get() == failed + 2
    assert users.vectors.written == []
    r.changed({"u3": activity(1)})
    await asyncio.wait_for(r.idle.wait(), 5)
    assert users.vectors.written == ["u3"]


async def test_users_go_in_batches_with_their_newest_activity_and_the_queue_is_bounded(
    monkeypatch,
):
    monkeypatch.setattr(vectors, "MAX_PENDING", 10)
    monkeypatch.setattr(vectors, "BATCH", 4)
    users = Users()
    r, calls = refresher(users)
    skipped = vectors.WRITTEN.labels("skipped")._value.get()
    r.changed({f"u{n}": activity(1) for n in range(25)})
    r.changed({"u0": activity(2)})  # pending already: the newer activity, not skipped
    await asyncio.wait_for(r.idle.wait(), 5)
    assert [len(c) for c in calls] == [4, 4, 2]  # one EmbedUsers call a batch
    assert calls[0][0] == ("u0", 2)
    assert users.vectors.written == [f"u{n}" for n in range(10)]
    assert vectors.WRITTEN.labels("skipped")._value.get() == skipped + 15
