"""Events written behind their push, with the real Feast stores (SQLite and
Redis): a push's events are served at once, before the store has them; the
push answers once they are stored; what merges while a write is under way
is written next, not lost; a clean stop writes everything merged. The
store's write is held back (a gate, or a slow store) to see each moment;
the writes themselves are the real ones."""

import asyncio
import threading
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from recserve.features.v1 import features_pb2 as pb
from tests.helpers import apoll_until
from tests.integration.test_features import features, start

__all__ = ["features"]  # the fixture: SQLite and Redis

USER = "7"
NAMES = ["rating_count", "recent_item_ids"]


def stored_activity(service, user_id: str) -> dict[str, object]:
    """The user's activity as Feast's SDK reads it from the online store."""
    rows = service.domain.store.get_online_features(
        features=[f"user_activity:{n}" for n in NAMES], entity_rows=[{"user_id": user_id}]
    ).to_dict()
    return {n: rows[n][0] for n in NAMES}


def event(item_id: str, rating: float) -> pb.PushUserEventsRequest:
    when = Timestamp()
    when.FromDatetime(datetime.now(UTC))
    return pb.PushUserEventsRequest(
        events=[pb.UserEvent(user_id=USER, item_id=item_id, rating=rating, event_time=when)]
    )


async def test_a_push_is_served_at_once_answered_once_stored_and_what_merges_meanwhile_too(
    features, monkeypatch
):
    stub, service = features
    writer = service.domain.event_writer
    gate = threading.Event()
    real_write = writer._write

    def held_write(*args):  # the store's write waits for the gate, then runs as ever
        assert gate.wait(30), "the gate was never opened"
        real_write(*args)

    monkeypatch.setattr(writer, "_write", held_write)
    before = stored_activity(service, USER)
    item = (await stub.GetItemFeatures(pb.GetItemFeaturesRequest(item_ids=["11"]))).items[0]

    def served(more):
        async def check():
            user = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id=USER))).user
            return user.rating_count == before["rating_count"] + more and user

        return check

    first = asyncio.ensure_future(stub.PushUserEvents(event("11", 5.0)))  # its write waits
    await apoll_until(served(1), 30, 0.02)
    second = asyncio.ensure_future(stub.PushUserEvents(event("12", 0)))  # merged meanwhile
    user = await apoll_until(served(2), 30, 0.02)
    assert list(user.recent_item_ids[:2]) == ["12", "11"]
    assert stored_activity(service, USER) == before  # the store has neither yet
    assert not first.done() and not second.done()  # answered only once stored
    assert USER in service.domain.user_reader.unwritten

    gate.set()
    await first
    await second  # answered: in the store
    stored = stored_activity(service, USER)
    assert stored["rating_count"] == before["rating_count"] + 2  # both, not the first alone
    assert stored["recent_item_ids"][:2] == ["12", "11"]
    await writer.flush()
    assert not service.domain.user_reader.unwritten and not service.domain.item_reader.unwritten
    service.domain.invalidate_items(["11"])  # the item's statistics, from the store
    after = (await stub.GetItemFeatures(pb.GetItemFeaturesRequest(item_ids=["11"]))).items[0]
    assert after.popularity == item.popularity + 1


async def test_a_clean_stop_writes_every_merged_row(built, tmp_path, monkeypatch):
    service, channel, stub = await start(built, tmp_path)
    writer = service.domain.event_writer
    gate = threading.Event()
    real_write = writer._write

    def held_write(*args):  # the first write waits for the stop to begin
        assert gate.wait(30), "the gate was never opened"
        real_write(*args)

    async def open_gate():
        gate.set()

    monkeypatch.setattr(writer, "_write", held_write)
    service.cleanups.insert(0, open_gate)  # the stop's first step
    before = stored_activity(service, USER)

    async def merged(more):
        user = (await stub.GetUserFeatures(pb.GetUserFeaturesRequest(user_id=USER))).user
        return user.rating_count == before["rating_count"] + more

    pushes = [asyncio.ensure_future(stub.PushUserEvents(event("11", 4.0)))]
    await apoll_until(lambda: merged(1), 30, 0.02)  # its write held at the gate
    pushes.append(asyncio.ensure_future(stub.PushUserEvents(event("12", 3.0))))
    await apoll_until(lambda: merged(2), 30, 0.02)  # for the next write, after a rest
    await service.stop(0)  # the stop writes it at once, not after the rest
    await asyncio.gather(*pushes, return_exceptions=True)
    await channel.close()
    assert writer._writer is not None and writer._writer.done()
    assert stored_activity(service, USER)["rating_count"] == before["rating_count"] + 2
    assert not service.domain.user_reader.unwritten
