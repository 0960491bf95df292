"""The gateway's queue of live feature updates (services.gateway.online_updates):
what queues while a call runs goes in one call, per token and up to the
features service's limit; a full queue drops (counted), a failed call is
counted and the rest still go. The real path: tests/e2e/test_events.py."""

import asyncio

import grpc
import pytest

from recserve.features.v1 import features_pb2 as fpb
from services.gateway.online_updates import ONLINE, OnlineUpdates

APP = (("authorization", "Bearer app"),)
OTHER = (("authorization", "Bearer other"),)


def events(n, user="u"):
    return [fpb.UserEvent(user_id=f"{user}{i}", item_id="i", rating=4.0) for i in range(n)]


class Features:
    """Records each call; the first waits until released, so batches queue."""

    def __init__(self, fail_first=False):
        self.calls = []
        self.release = asyncio.Event()
        self.fail_first = fail_first

    async def PushUserEvents(self, request, timeout, metadata):
        self.calls.append((len(request.events), dict(metadata).get("authorization")))
        if len(self.calls) == 1:
            await self.release.wait()
            if self.fail_first:
                raise grpc.aio.AioRpcError(
                    grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata()
                )
        return fpb.PushUserEventsResponse()


def count(outcome):
    return ONLINE.labels(outcome)._value.get()


async def test_what_queues_during_a_call_goes_in_one_call_per_token_and_limit():
    features = Features()
    online = OnlineUpdates(features, max_batch=250)
    online.submit(events(10), APP)  # in flight, held
    await asyncio.sleep(0)
    for _ in range(4):
        online.submit(events(100), APP)  # 400 queued behind it
    online.submit(events(30), OTHER)
    online.submit(events(20), APP)
    features.release.set()
    await online.idle()
    assert features.calls == [
        (10, "Bearer app"),
        (200, "Bearer app"),  # two more would pass 250
        (200, "Bearer app"),
        (30, "Bearer other"),  # another token: a call of its own
        (20, "Bearer app"),
    ]
    assert online.queued == 0


async def test_a_batch_above_the_limit_is_split():
    features = Features()
    features.release.set()
    online = OnlineUpdates(features, max_batch=300)
    online.submit(events(700), APP)
    await online.idle()
    assert [n for n, _ in features.calls] == [300, 300, 100]


async def test_a_full_queue_drops_and_a_failed_call_does_not_stop_the_rest():
    features = Features(fail_first=True)
    online = OnlineUpdates(features, max_batch=1000, max_queued=150)
    dropped, failed, updated = count("dropped"), count("failed"), count("updated")
    online.submit(events(100), APP)  # in flight: no longer queued
    await asyncio.sleep(0)
    online.submit(events(100), APP)
    online.submit(events(100), APP)  # 200 > 150 queued: dropped
    online.submit(events(50), APP)
    features.release.set()
    await online.idle()
    assert count("dropped") - dropped == 100
    assert count("failed") - failed == 100  # the first call
    assert count("updated") - updated == 150
    assert [n for n, _ in features.calls] == [100, 150]


@pytest.mark.parametrize("features", [None])
async def test_without_a_features_service_nothing_queues(features):
    online = OnlineUpdates(features)
    online.submit(events(5), APP)
    assert online.queued == 0 and not online.queue


async def test_after_a_long_call_the_sender_rests_and_merges_what_arrives_meanwhile():
    """A call that took long is followed by a rest as long (at most
    max_rest_s): events submitted during the rest go in the next call with
    those queued during the call, not in a call of their own."""
    features = Features()
    online = OnlineUpdates(features, max_rest_s=5.0)
    online.submit(events(10), APP)
    await asyncio.sleep(0)
    online.submit(events(20), APP)  # queued during the call
    await asyncio.sleep(0.6)  # the call takes 0.6 s
    features.release.set()
    await asyncio.sleep(0.1)  # the sender rests about 0.6 s from the release
    online.submit(events(30), APP)
    await online.idle()
    assert [n for n, _ in features.calls] == [10, 50]
    assert online._last_call_s == 0.0  # ran dry: the next event goes at once
