"""The gateway's queue of live feature updates (services.gateway.online_updates):
what queues between calls goes in one call, per token and up to the
features service's limit; calls go at most one an interval, several under
way at once, the first after a quiet spell at once; a full queue drops
(counted), a failed call is counted and the rest still go. The real path:
tests/e2e/test_events.py."""

import asyncio
import time

import grpc
import pytest

from recserve.features.v1 import features_pb2 as fpb
from services.gateway.online_updates import ONLINE, OnlineUpdates
from tests.helpers import apoll_until

APP = (("authorization", "Bearer app"),)
OTHER = (("authorization", "Bearer other"),)


def events(n, user="u"):
    return [fpb.UserEvent(user_id=f"{user}{i}", item_id="i", rating=4.0) for i in range(n)]


class Features:
    """Records each call; the first (or every one) waits until released, so batches queue."""

    def __init__(self, fail_first=False, hold_every_call=False):
        self.calls = []
        self.release = asyncio.Event()
        self.fail_first = fail_first
        self.hold_every_call = hold_every_call

    async def PushUserEvents(self, request, timeout, metadata):
        self.calls.append((len(request.events), dict(metadata).get("authorization")))
        if len(self.calls) == 1 or self.hold_every_call:
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
    online = OnlineUpdates(features, max_batch=250, interval_s=0.01)
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
    online = OnlineUpdates(features, max_batch=300, interval_s=0.01)
    online.submit(events(700), APP)
    await online.idle()
    assert [n for n, _ in features.calls] == [300, 300, 100]


async def test_a_full_queue_drops_and_a_failed_call_does_not_stop_the_rest():
    features = Features(fail_first=True)
    online = OnlineUpdates(features, max_batch=1000, max_queued=150, interval_s=0.01)
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


async def test_a_call_under_way_holds_no_other_and_what_queues_while_all_are_goes_in_one():
    """Calls go one an interval without waiting for the ones under way (each
    answers only once stored), up to max_in_flight; what queues while every
    call is under way goes in the next, together."""
    features = Features(hold_every_call=True)
    online = OnlineUpdates(features, interval_s=0.01, max_in_flight=2)
    online.submit(events(10), APP)
    await apoll_until(async_true(lambda: len(features.calls) == 1))
    online.submit(events(20), APP)
    await apoll_until(async_true(lambda: len(features.calls) == 2))  # the first still under way
    online.submit(events(30), APP)
    online.submit(events(40), APP)
    await apoll_until(async_true(online._slots.locked))  # both slots taken: the sender waits
    assert len(features.calls) == 2 and online.queued == 70
    features.release.set()
    await online.idle()
    assert [n for n, _ in features.calls] == [10, 20, 70]


async def test_after_a_quiet_spell_the_first_events_go_at_once():
    features = Features()
    features.release.set()
    online = OnlineUpdates(features, interval_s=0.2)
    online.submit(events(5), APP)
    await online.idle()
    await apoll_until(async_true(lambda: time.monotonic() > online._sent_at + 0.2))
    online.submit(events(7), APP)
    for _ in range(3):  # the sender's task starts, takes the batch and calls
        await asyncio.sleep(0)
    assert [n for n, _ in features.calls] == [5, 7]


def async_true(condition):
    async def check():
        return condition()

    return check
