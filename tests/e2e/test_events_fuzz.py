"""Generated bad event batches through Envoy, with the app's token: every
batch holds at least one bad event among good ones, so each must be
INVALID_ARGUMENT as a whole, and afterwards no event of any of them is in
the log (nothing partial written); undecodable bytes too; no process dies."""

import time

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recserve.recommend.v1 import events_pb2 as epb
from recserve.recommend.v1 import events_pb2_grpc
from recserve_kit.jsonl_log import read_records

pytestmark = pytest.mark.local_stack_only  # reads the log under the local stack's data dir

CASES = 1000
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=140)
good_ids = st.from_regex(r"fuzz-[a-z0-9]{1,20}", fullmatch=True)


def good_event(event_id: str) -> epb.AppEvent:
    return epb.AppEvent(
        event_id=event_id, user_id="42", item_id="50", event_type="rating", value=4.0
    )


# One defect each: a field made bad in an otherwise good event.
defects = st.one_of(
    st.tuples(st.just("event_id"), st.sampled_from(["", "bad id", "x" * 129, "\u00b2"])),
    st.tuples(st.just("user_id"), st.sampled_from(["", "a b", "\u0664\u0662", "y" * 200])),
    st.tuples(st.just("item_id"), text.filter(lambda t: not t.isascii() or " " in t or not t)),
    st.tuples(st.just("event_type"), text.filter(lambda t: t != "rating")),
    st.tuples(
        st.just("value"),
        st.one_of(
            st.floats(allow_nan=True).filter(lambda v: not 1 <= v <= 5),
            st.sampled_from([float("nan"), float("inf"), 0.0, 5.5]),
        ),
    ),
    st.tuples(
        st.just("timestamp"),
        st.one_of(st.integers(-(2**63), -1), st.integers(int(time.time()) + 2 * 86400, 2**62)),
    ),
    st.tuples(st.just("recommendation_id"), st.sampled_from(["bad id", "z" * 129, "\u00e9"])),
)
batches = st.tuples(st.lists(good_ids, max_size=5, unique=True), defects, st.integers(0, 5))


def test_generated_bad_batches_are_refused_whole_and_nothing_is_kept(stack):
    token = (stack.data_dir / "auth" / "app.token").read_text().strip()
    metadata = [("authorization", f"Bearer {token}")]
    channel = grpc.insecure_channel(stack.envoy_address)
    stub = events_pb2_grpc.EventServiceStub(channel)
    raw = channel.unary_unary(
        "/recserve.recommend.v1.EventService/PushEvents",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    restarts = stack.restarts()
    sent: set[str] = set()
    seen: dict[str, int] = {}

    @settings(max_examples=CASES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(batches, st.binary(max_size=200))
    def one(batch, junk):
        ids, (field, value), position = batch
        events = [good_event(i) for i in ids]
        bad = good_event(f"fuzz-bad-{len(sent)}")
        setattr(bad, field, value)
        events.insert(min(position, len(events)), bad)
        sent.update(e.event_id for e in events)
        with pytest.raises(grpc.RpcError) as refused:
            stub.PushEvents(epb.PushEventsRequest(events=events), metadata=metadata, timeout=5)
        code = refused.value.code()
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (field, value, refused.value.details())
        assert refused.value.details().startswith("events"), refused.value.details()
        seen[field] = seen.get(field, 0) + 1
        try:
            raw(junk, metadata=metadata, timeout=5)  # bytes that may decode to anything
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()

    try:
        one()
    finally:
        channel.close()
    assert sum(seen.values()) >= CASES and len(seen) == 7, seen
    kept = {r["event_id"] for r in read_records(stack.data_dir / "events" / "app")}
    assert not kept & sent, sorted(kept & sent)[:5]  # nothing partial written
    assert stack.restarts() == restarts
