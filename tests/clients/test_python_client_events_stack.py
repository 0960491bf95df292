"""The Python client's EventBatcher against the real stack through Envoy,
with the app token the stack wrote: 10,000 events while one of the two
gateways is killed midway. A call the dead gateway held is sent again
with the same ids, so every event is acknowledged and the event log holds
each exactly once."""

from __future__ import annotations

import os
import signal

from recserve_client import ClientOptions, Event, EventBatcher, RecserveClient

from recserve_kit.jsonl_log import read_records
from tests.helpers import poll_until

EVENTS = 10_000


def rating(n: int) -> Event:
    # The demo's users 1-943 and films 1-1682; it declares only ratings.
    return Event(f"kill-{n}", str(1 + n % 943), str(1 + n * 7 % 1682), "rating", value=1.0 + n % 5)


def test_ten_thousand_events_through_a_killed_gateway_are_each_kept_once(stack):
    token = (stack.data_dir / "auth" / "app.token").read_text().strip()
    gateways = stack.gateway_pids()
    assert len(gateways) == 2
    with RecserveClient(stack.envoy_address, ClientOptions(token=token)) as client:
        batcher = EventBatcher(client, batch_size=250, flush_interval_s=0.05)
        with batcher:
            for n in range(EVENTS):
                assert batcher.add(rating(n))
                if n == EVENTS // 2:
                    os.kill(gateways[0], signal.SIGKILL)
            assert batcher.flush(timeout_s=300), batcher.stats
        stats = batcher.stats
    assert stats.accepted + stats.duplicates == EVENTS, stats
    dropped = stats.dropped_full + stats.dropped_rejected + stats.dropped_failed
    assert dropped + stats.dropped_at_close == 0, stats

    logged = [
        record["event_id"]
        for record in read_records(stack.data_dir / "events" / "app")
        if record["event_id"].startswith("kill-")
    ]
    assert len(logged) == EVENTS and set(logged) == {f"kill-{n}" for n in range(EVENTS)}

    def both_back() -> bool:
        found = stack.gateway_pids()
        return len(found) == 2 and gateways[0] not in found

    poll_until(both_back, 60, 0.2, "the runner to restart the killed gateway")
