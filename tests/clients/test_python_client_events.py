"""The Python client's events: PushEvents, one call, and EventBatcher's
batches (bounded by size and by time), retries with the same event ids,
refusals dropped and counted, a full queue, flush and close. Against an
in-process EventService that keeps events as the gateway does (all or
nothing, once per event id). No stack needed.

Waits poll with generous timeouts; nothing asserts that something happened
within a time, only that it did not happen before one."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time

import grpc
import pytest
from recserve_client import (
    AsyncRecserveClient,
    ClientOptions,
    Event,
    EventBatcher,
    InvalidRequest,
    NotAuthorized,
    PushResult,
    RecserveClient,
    Unavailable,
    new_event_id,
)
from recserve_client._proto import POOL
from recserve_client._proto import events_pb2 as client_events_pb2
from recserve_client.events import check_event

from tests.clients.fake_server import fake_server
from tests.helpers import poll_until

CODE = grpc.StatusCode
# For a test that waits for a batch of a size: never one sent by time.
NEVER_BY_TIME = 600.0
FAST_RETRY = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05}


def click(n: int | str, **fields) -> Event:
    return Event(f"click-{n}", "42", str(n), fields.pop("event_type", "click"), **fields)


def ids(*events: Event) -> list[str]:
    return [e.event_id for e in events]


def wait_for(condition, what: str, timeout_s: float = 30.0):
    return poll_until(condition, timeout_s, 0.01, what)


def test_push_events_is_one_call_kept_once_per_id():
    with fake_server() as (target, script):
        options = ClientOptions(token="app-t0k")
        with RecserveClient(target, options) as client:
            batch = [click(1, recommendation_id="rec-1"), click(2, value=4.0, event_type="rating")]
            assert client.push_events(batch) == PushResult(accepted=2, duplicates=0)
            assert client.push_events(batch) == PushResult(accepted=0, duplicates=2)
            with pytest.raises(InvalidRequest) as raised:
                client.push_events([click(3), click(4, event_type="purchase")])
            assert raised.value.field == "events[1].event_type"
            # Not retried by the channel: its policy names the reads only.
            script.events.actions = [("fail", CODE.UNAVAILABLE, "down")]
            with pytest.raises(Unavailable):
                client.push_events([click(5)])
        events = script.events
        assert events.calls == [ids(*batch), ids(*batch), ["click-3", "click-4"], ["click-5"]]
        assert events.kept == ["click-1", "click-2"]
        assert events.metadata[0]["authorization"] == "Bearer app-t0k"


async def test_the_asyncio_client_pushes_events():
    with fake_server() as (target, script):
        async with AsyncRecserveClient(target) as client:
            assert await client.push_events([click(1), click(2)]) == PushResult(2, 0)
            script.events.actions = [("fail", CODE.UNAUTHENTICATED, "no token")]
            with pytest.raises(NotAuthorized):
                await client.push_events([click(3)])
        assert script.events.kept == ["click-1", "click-2"]


def test_the_stubs_live_in_the_clients_own_pool_beside_the_servers():
    from recserve.recommend.v1 import events_pb2 as server_events_pb2

    assert client_events_pb2.DESCRIPTOR.pool is POOL
    sent = client_events_pb2.PushEventsRequest(events=[client_events_pb2.AppEvent(event_id="e")])
    parsed = server_events_pb2.PushEventsRequest.FromString(sent.SerializeToString())
    assert parsed.events[0].event_id == "e"


def test_a_batch_goes_when_it_is_full():
    with fake_server() as (target, script), RecserveClient(target) as client:
        batcher = EventBatcher(client, batch_size=3, flush_interval_s=NEVER_BY_TIME)
        events = [click(n) for n in range(7)]
        assert all(batcher.add(e) for e in events)
        wait_for(lambda: len(script.events.calls) == 2, "two full batches")
        assert script.events.calls == [ids(*events[:3]), ids(*events[3:6])]
        wait_for(lambda: batcher.stats.accepted == 6, "their answers")
        assert batcher.stats.queued == 1  # the seventh waits for more, or its time
        assert batcher.close()
        assert script.events.calls[2:] == [["click-6"]]  # close sent it
        stats = batcher.stats
        assert (stats.accepted, stats.batches, stats.queued, stats.sending) == (7, 3, 0, 0)


def test_a_partial_batch_goes_when_its_oldest_event_has_waited_the_interval():
    with (
        fake_server() as (target, script),
        RecserveClient(target) as client,
        EventBatcher(client, flush_interval_s=0.2) as batcher,
    ):
        before = time.monotonic()
        batcher.add(click(1))
        wait_for(lambda: script.events.kept == ["click-1"], "the event sent by time")
        assert script.events.called_at[0] - before >= 0.2  # not before its time
        # The server kept it; the batcher counts it once the reply is back.
        wait_for(lambda: batcher.stats.batches == 1, "the batch counted")
        assert batcher.stats.accepted == 1


@pytest.mark.parametrize(
    "failure, accepted",
    [
        (("fail", CODE.UNAVAILABLE, "no healthy upstream"), 3),
        (("fail", CODE.RESOURCE_EXHAUSTED, "local_rate_limited"), 3),
        # Kept, and the answer lost: the resend is counted as duplicates.
        (("lost", CODE.DEADLINE_EXCEEDED), 0),
        (("lost", CODE.UNAVAILABLE), 0),
    ],
)
def test_a_failed_call_is_sent_again_with_the_same_ids_and_kept_once(failure, accepted):
    with fake_server() as (target, script), RecserveClient(target) as client:
        script.events.actions = [failure]
        events = [click(1), click(2), click(3)]
        with EventBatcher(client, **FAST_RETRY) as batcher:
            for event in events:
                batcher.add(event)
            assert batcher.flush(timeout_s=30)
            stats = batcher.stats
        assert script.events.calls == [ids(*events), ids(*events)]
        assert script.events.kept == ids(*events)
        assert (stats.accepted, stats.duplicates, stats.retries) == (accepted, 3 - accepted, 1)
        assert stats.last_error is not None and stats.last_error.code == failure[1].name


def test_retries_end_at_max_attempts_and_the_batch_is_dropped_and_counted():
    with fake_server() as (target, script), RecserveClient(target) as client:
        script.events.actions = [("fail", CODE.UNAVAILABLE, "down")] * 5
        with EventBatcher(client, max_attempts=3, **FAST_RETRY) as batcher:
            batcher.add(click(1))
            batcher.add(click(2))
            assert batcher.flush(timeout_s=30)
            stats = batcher.stats
        assert len(script.events.calls) == 3 and script.events.kept == []
        assert (stats.dropped_failed, stats.retries, stats.accepted) == (2, 2, 0)
        assert isinstance(stats.last_error, Unavailable)


def test_a_refused_event_is_dropped_never_resent_and_the_rest_is_kept(caplog):
    events = [click(1), click(2, event_type="purchase"), click(3)]
    with (
        fake_server() as (target, script),
        RecserveClient(target) as client,
        caplog.at_level(logging.WARNING, "recserve_client.events"),
        EventBatcher(client, **FAST_RETRY) as batcher,
    ):
        for event in events:
            batcher.add(event)
        assert batcher.flush(timeout_s=30)
        stats = batcher.stats
        # Nothing of the refused call was kept: the rest goes once, without it.
        assert script.events.calls == [ids(*events), ["click-1", "click-3"]]
        assert script.events.kept == ["click-1", "click-3"]
        assert (stats.accepted, stats.dropped_rejected, stats.retries) == (2, 1, 0)
        assert isinstance(stats.last_error, InvalidRequest)
        assert stats.last_error.field == "events[1].event_type"
        assert "events[1].event_type" in caplog.text


@pytest.mark.parametrize(
    "code", [CODE.UNAUTHENTICATED, CODE.PERMISSION_DENIED, CODE.INVALID_ARGUMENT, CODE.INTERNAL]
)
def test_a_refused_batch_is_dropped_whole_after_one_call(code, caplog):
    with (
        fake_server() as (target, script),
        RecserveClient(target) as client,
        caplog.at_level(logging.WARNING, "recserve_client.events"),
        EventBatcher(client, **FAST_RETRY) as batcher,
    ):
        script.events.actions = [("fail", code, "refused")]  # naming no event
        batcher.add(click(1))
        batcher.add(click(2))
        assert batcher.flush(timeout_s=30)
        stats = batcher.stats
        assert len(script.events.calls) == 1 and script.events.kept == []
        assert (stats.dropped_rejected, stats.retries, stats.accepted) == (2, 0, 0)
        assert stats.last_error is not None and stats.last_error.code == code.name
        assert "dropped 2" in caplog.text


def test_past_max_queued_new_events_are_dropped_and_counted(caplog):
    held = threading.Event()
    with fake_server() as (target, script), RecserveClient(target) as client:
        script.events.actions = [("wait", held)]
        batcher = EventBatcher(client, batch_size=2, max_queued=3, flush_interval_s=NEVER_BY_TIME)
        try:
            assert batcher.add(click(1)) and batcher.add(click(2))
            wait_for(lambda: script.events.calls, "the first batch held at the server")
            with caplog.at_level(logging.WARNING, "recserve_client.events"):
                added = [batcher.add(click(n)) for n in range(3, 8)]
            assert added == [True, True, True, False, False]  # the newest are dropped
            stats = batcher.stats
            assert (stats.queued, stats.sending, stats.dropped_full) == (3, 2, 2)
            assert caplog.text.count("queue full") == 1  # once per spell of drops
        finally:
            held.set()
        assert batcher.close(timeout_s=30)
        assert script.events.kept == [f"click-{n}" for n in range(1, 6)]
        assert batcher.stats.accepted == 5


def test_close_sends_what_is_queued_and_later_adds_raise():
    with fake_server() as (target, script), RecserveClient(target) as client:
        batcher = EventBatcher(client, flush_interval_s=NEVER_BY_TIME)
        events = [click(n) for n in range(5)]
        for event in events:
            batcher.add(event)
        assert batcher.close(timeout_s=30)
        assert script.events.calls == [ids(*events)]
        assert batcher.stats.accepted == 5 and batcher.stats.queued == 0
        with pytest.raises(RuntimeError, match="closed"):
            batcher.add(click(9))
        assert batcher.close()  # again: nothing to do


EXITS_WITHOUT_CLOSE = """
import sys
from recserve_client import Event, EventBatcher, RecserveClient
client = RecserveClient(sys.argv[1])
batcher = EventBatcher(client, flush_interval_s=600)
for n in range(3):
    batcher.add(Event(f"exit-{n}", "42", str(n), "click"))
"""


def test_a_batcher_left_open_is_closed_when_the_interpreter_exits():
    with fake_server() as (target, script):
        done = subprocess.run(
            [sys.executable, "-c", EXITS_WITHOUT_CLOSE, target], capture_output=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert script.events.kept == ["exit-0", "exit-1", "exit-2"]


def test_flush_sends_a_partial_batch_and_the_batcher_goes_on():
    with fake_server() as (target, script), RecserveClient(target) as client:
        with EventBatcher(client, flush_interval_s=NEVER_BY_TIME) as batcher:
            batcher.add(click(1))
            assert batcher.flush(timeout_s=30)
            assert script.events.kept == ["click-1"]
            batcher.add(click(2))
            assert batcher.flush(timeout_s=30)
        assert script.events.calls == [["click-1"], ["click-2"]]


def test_a_close_whose_timeout_runs_out_drops_and_counts_what_is_left(caplog):
    with fake_server() as (target, script), RecserveClient(target) as client:
        script.events.actions = [("fail", CODE.UNAVAILABLE, "down")] * 20
        slow = {"initial_backoff_s": 60.0, "max_backoff_s": 60.0}
        batcher = EventBatcher(client, batch_size=2, flush_interval_s=NEVER_BY_TIME, **slow)
        for n in range(5):
            batcher.add(click(n))
        with caplog.at_level(logging.WARNING, "recserve_client.events"):
            assert not batcher.close(timeout_s=0.2)
        wait_for(lambda: batcher.stats.dropped_at_close == 5, "every event counted")
        assert script.events.kept == [] and "unsent" in caplog.text
        stats = batcher.stats
        assert stats.accepted == 0 and stats.sending == 0 and stats.queued == 0, stats


def test_an_id_repeated_in_one_batch_is_sent_once():
    """The service refuses a call naming an id twice (an app's own retry of
    one click): the batcher sends it once and counts the repeat."""
    with fake_server() as (target, script), RecserveClient(target) as client:
        with EventBatcher(client, flush_interval_s=NEVER_BY_TIME) as batcher:
            for event in (click(1), click(2), click(1)):
                batcher.add(event)
            assert batcher.flush(timeout_s=30)
            stats = batcher.stats
        assert script.events.calls == [["click-1", "click-2"]]
        assert (stats.accepted, stats.duplicates) == (2, 1)


@pytest.mark.parametrize(
    "event, field",
    [
        (Event("a b", "42", "50", "click"), "event_id"),
        (Event("", "42", "50", "click"), "event_id"),
        (Event("e-1", "42", "x" * 129, "click"), "item_id"),
        (Event("e-1", "42", "50", "click", recommendation_id="r?"), "recommendation_id"),
        (Event("e-1", "42", "50", ""), "event_type"),
        (Event("e-1", "42", "50", "rating", value=float("nan")), "value"),
        (Event("e-1", "42", "50", "click", timestamp=-1), "timestamp"),
    ],
)
def test_an_event_the_service_would_refuse_raises_at_add(event, field):
    with fake_server() as (target, script), RecserveClient(target) as client:
        with EventBatcher(client) as batcher:
            with pytest.raises(ValueError, match=f"^{field}: "):
                batcher.add(event)
            assert batcher.stats.queued == 0
        assert script.events.calls == []


def test_new_event_ids_are_fresh_and_within_the_id_policy():
    made = {new_event_id() for _ in range(1000)}
    assert len(made) == 1000
    for event_id in list(made)[:10]:
        check_event(Event(event_id, "42", "50", "click"))


def test_the_batcher_refuses_bounds_the_service_does_not_take():
    with fake_server() as (target, _), RecserveClient(target) as client:
        with pytest.raises(ValueError, match="batch_size"):
            EventBatcher(client, batch_size=1001)
        with pytest.raises(ValueError):
            EventBatcher(client, flush_interval_s=0)
