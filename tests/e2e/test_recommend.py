"""The product as users meet it: through Envoy, against the real stack."""

import asyncio
import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

import grpc
import httpx
import pandas as pd
import pytest

from recserve.recommend.v1 import recommend_pb2 as pb
from recserve.recommend.v1 import recommend_pb2_grpc
from recserve.retriever.v1 import retriever_pb2 as rpb
from recserve.retriever.v1 import retriever_pb2_grpc
from tests.helpers import asked_until, cold_start_answer, full_answer, poll_until

REASON = pb.DegradedReason.Name


@pytest.fixture(scope="module")
def history(built):
    activity = pd.read_parquet(built.directory / "features" / "user_activity.parquet")
    return dict(zip(activity["user_id"], activity["seen_item_ids"], strict=True))


def test_recommendations_are_valid_sorted_unseen_and_filtered(stub, history, built):
    for user_id in ("1", "42", "500", "943"):
        reply = full_answer(stub, user_id)
        ids = [i.item_id for i in reply.items]
        assert len(ids) == 20 and len(set(ids)) == 20
        scores = [i.score for i in reply.items]
        assert scores == sorted(scores, reverse=True)
        assert not set(ids) & set(history[user_id])
        assert all(i.title for i in reply.items)
        assert reply.model_version == built.version and reply.request_id
    excluded = [i.item_id for i in full_answer(stub, "42").items[:3]]
    filtered = full_answer(
        stub,
        "42",
        filter=pb.ItemFilter(categories=["Horror", "Western"], exclude_item_ids=excluded),
    )
    assert filtered.items
    for item in filtered.items:
        assert {"Horror", "Western"} & set(item.categories)
        assert item.item_id not in excluded


def test_similar_items_and_cold_start(stub):
    similar = stub.SimilarItems(pb.SimilarItemsRequest(item_id="1", k=10), timeout=2)
    assert len(similar.items) == 10 and "1" not in {i.item_id for i in similar.items}
    # Personalised: a full answer comes (asked again while a stage is late on
    # a busy host; a late stage degrades an answer, it is not a wrong one).
    request = pb.SimilarItemsRequest(item_id="1", k=10, user_id="42")

    def full() -> pb.SimilarItemsResponse | None:
        reply = stub.SimilarItems(request, timeout=2)
        return None if reply.degraded else reply

    personal = poll_until(full, 30, 0.2, "a full SimilarItems answer")
    assert len(personal.items) == 10
    cold = cold_start_answer(stub, pb.RecommendRequest(user_id="new-user-x", k=5))
    assert cold.degraded
    assert len(cold.items) == 5

    def unknown_item() -> grpc.StatusCode | None:
        """NOT_FOUND, once the retriever answers in time: a late retriever
        (a busy host, one just restarted) degrades the answer instead."""
        try:
            reply = stub.SimilarItems(
                pb.SimilarItemsRequest(item_id="no-such-item", k=5), timeout=2
            )
        except grpc.RpcError as refused:
            return refused.code()
        assert reply.degraded, "an unknown item got a full answer"
        return None

    assert (
        poll_until(unknown_item, 30, 0.2, "the unknown item refused") == grpc.StatusCode.NOT_FOUND
    )


def post_json(stack, path, body, headers=None):
    request = urllib.request.Request(
        f"http://{stack.envoy_address}{path}",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_json_through_transcoding(stack, stub):
    full_answer(stub)
    status, body = post_json(stack, "/v1/recommend", {"user_id": "42", "k": 10})
    assert status == 200
    assert len(body["items"]) == 10 and body["items"][0]["title"]
    status, body = post_json(stack, "/v1/similar-items", {"item_id": "50", "k": 3})
    assert status == 200 and len(body["items"]) == 3
    status, _ = post_json(stack, "/v1/recommend", {"user_id": "42", "k": 0})
    assert status == 400


@pytest.mark.parametrize(
    "request_fields, field",
    [
        ({"user_id": "42", "k": 0}, "k"),
        ({"user_id": "42", "k": 101}, "k"),
        ({"user_id": "", "k": 5}, "user_id"),
        ({"user_id": "42", "k": 5, "filter": pb.ItemFilter(categories=[""])}, "filter.categories"),
    ],
)
def test_bad_input_names_the_field(stub, request_fields, field):
    with pytest.raises(grpc.RpcError) as raised:
        stub.Recommend(pb.RecommendRequest(**request_fields), timeout=2)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith(field + ":")


def test_bad_ids_and_unknown_categories_are_client_errors_not_outages(stack, stub):
    """These were once degraded answers counted as
    RETRIEVER_UNAVAILABLE (an outage anyone could inflate) or aliased ids."""
    full_answer(stub)
    before = outages(stack)
    cases = [
        (stub.SimilarItems, pb.SimilarItemsRequest(item_id="x" * 129, k=5), "item_id"),
        (stub.SimilarItems, pb.SimilarItemsRequest(item_id="\u2460", k=5), "item_id"),
        (
            stub.SimilarItems,
            pb.SimilarItemsRequest(item_id="1", k=5, filter=pb.ItemFilter(categories=["comedy"])),
            "filter.categories",
        ),
        (
            stub.Recommend,
            pb.RecommendRequest(user_id="42", k=5, filter=pb.ItemFilter(categories=["comedy"])),
            "filter.categories",
        ),
        (
            stub.Recommend,
            pb.RecommendRequest(
                user_id="42", k=5, filter=pb.ItemFilter(exclude_item_ids=["1", "\u00b2"])
            ),
            "filter.exclude_item_ids[1]",
        ),
        (stub.Recommend, pb.RecommendRequest(user_id="\u0664\u0662", k=5), "user_id"),
    ]
    for call, request, field in cases:
        with pytest.raises(grpc.RpcError) as raised:
            call(request, timeout=2)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert raised.value.details().startswith(field + ":"), raised.value.details()
    assert outages(stack) == before


def outages(stack):
    """Degraded answers counted as a retriever outage so far (0 before the first)."""
    try:
        return gateway_metric(
            stack, 'recserve_gateway_fallback_total{reason="retriever_unavailable"}'
        )
    except AssertionError:
        return 0.0


def test_a_malformed_body_through_envoy_is_invalid_argument(stack):
    """Finding 2: the issue's reproducer frame got UNKNOWN naming DecodeError."""
    with grpc.insecure_channel(stack.envoy_address) as channel:
        raw = channel.unary_unary(
            "/recserve.recommend.v1.RecommendService/Recommend",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.RpcError) as raised:
            raw(bytes.fromhex("12 02 ff fe 18 03"), timeout=2)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "DecodeError" not in raised.value.details()


def test_the_edge_refuses_large_bodies_and_slow_clients(stack):
    """A 20 MB JSON body was once answered 200; a client
    that never finishes its headers could hold a connection forever."""
    status, _ = post_json(stack, "/v1/recommend", {"user_id": "42", "k": 5, "pad": "x" * (2 << 20)})
    assert status == 413
    status, body = post_json(stack, "/v1/recommend", {"user_id": "42", "k": 5})
    assert status == 200 and len(body["items"]) == 5  # ordinary bodies still pass
    host, port = stack.envoy_address.split(":")
    with socket.create_connection((host, int(port)), timeout=15) as slow:
        slow.sendall(b"POST /v1/recommend HTTP/1.1\r\nHost: recserve\r\n")  # never finished
        started = time.monotonic()
        answer = slow.recv(4096)  # Envoy answers 408 and closes, or just closes
        assert time.monotonic() - started < 12
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408")


def test_bad_grpc_timeout_or_encoding_headers_are_invalid_argument(stack):
    """These once came back INTERNAL from the gateway's gRPC
    library; Envoy now answers them as the client's error."""
    payload = pb.RecommendRequest(user_id="42", k=3).SerializeToString()
    frame = b"\x00" + len(payload).to_bytes(4, "big") + payload
    url = f"http://{stack.envoy_address}/recserve.recommend.v1.RecommendService/Recommend"
    base = {"content-type": "application/grpc", "te": "trailers"}
    with httpx.Client(http1=False, http2=True, timeout=10) as client:
        for name, value in (
            ("grpc-timeout", "abc"),
            ("grpc-timeout", "123456789S"),  # nine digits: over the spec's eight
            ("grpc-encoding", "bogus"),
        ):
            reply = client.post(url, content=frame, headers={**base, name: value})
            assert reply.headers.get("grpc-status") == "3", (name, value)
            assert name in reply.headers["grpc-message"]
        for name, value in (("grpc-timeout", "5S"), ("grpc-encoding", "identity")):
            reply = client.post(url, content=frame, headers={**base, name: value})
            assert "grpc-status" not in reply.headers and len(reply.content) > 5, (name, value)


def test_a_gateway_killed_under_load_costs_no_client_error(stack, stub):
    """SIGKILL of the gateway under load once failed 21 of
    1,500 requests; with two gateways Envoy retries on the other one, and the
    runner brings the killed one back."""
    from bench.load import run_load

    full_answer(stub)
    gateways = stack.gateway_pids()
    assert len(gateways) == 2
    result = asyncio.run(
        run_load(
            stack.envoy_address,
            40,
            5.0,
            users=100,  # 1-100 only: FRESH_USERS must stay unembedded for the test below
            # 2 s into the load; the pid looked up before (no docker call in the loop)
            event=(2.0, lambda: os.kill(gateways[0], signal.SIGKILL)),
        )
    )
    assert result.sent == 200 and not result.errors, result.summary()

    def both_back():
        found = stack.gateway_pids()  # (0: a container not running)
        return len(found) == 2 and all(found) and gateways[0] not in found

    poll_until(both_back, 60, 0.2, "the runner to restart the killed gateway")
    stack.wait_whole()
    assert not full_answer(stub).degraded


@contextmanager
def frozen(stack, marker):
    """SIGSTOP a component (a hung dependency), SIGCONT it afterwards."""
    pid = stack.component_pid(marker)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def precomputed(stack):
    """Each user's list in the published re-scoring run."""
    run = json.loads((stack.data_dir / "rescoring" / "PUBLISHED.json").read_text())["run_id"]
    folder = stack.data_dir / "rescoring" / "runs" / run / "top_n"
    frame = pd.concat(pd.read_parquet(p) for p in folder.glob("bucket=*/*.parquet"))
    return {u: list(items) for u, items in zip(frame["user_id"], frame["item_ids"], strict=True)}


# Users no earlier request embedded (a vector of theirs is not cached), per
# case: no other e2e test may ask for them.
FRESH_USERS = {
    "services.features": ("901", "902"),
    "services.retriever": ("903", "904"),
    "services.ranker": ("905", "906"),
    "tritonserver": ("907", "908"),
}


def degraded_by(
    stub, user_id: str, reasons: set[str], tries: int = 20, **fields
) -> pb.RecommendResponse:
    """A Recommend reply, asked again while another stage than the one down
    missed its deadline, or the request was shed: on a busy host that happens
    too (once in Compose, FEATURES_TIMEOUT with Triton frozen), and such a
    reply says nothing about the dependency down. Any other reply is
    returned, to be checked."""
    request = pb.RecommendRequest(user_id=user_id, k=10, debug=True, **fields)
    for _ in range(tries):
        reply = stub.Recommend(request, timeout=2)
        reason = REASON(reply.degraded_reason).removeprefix("DEGRADED_REASON_")
        if reason in reasons or not (reason.endswith("_TIMEOUT") or reason == "SHED"):
            return reply
    return reply


def apart(*case):
    """A case that hangs one backend alone."""
    return pytest.param(*case, marks=pytest.mark.backends_apart)


@pytest.mark.parametrize(
    "marker, reasons, source",
    [
        # Without features the user is unknown: popular items.
        apart("services.features", {"FEATURES_TIMEOUT", "FEATURES_UNAVAILABLE"}, "POPULAR"),
        # With them, the user's own list from the nightly run.
        apart("services.retriever", {"RETRIEVER_TIMEOUT", "RETRIEVER_UNAVAILABLE"}, "PRECOMPUTED"),
        # The ranker or Triton down: ranked by retrieval (the user's stored vector).
        apart("services.ranker", {"RANKER_TIMEOUT", "RANKER_UNAVAILABLE"}, "RETRIEVAL_ORDER"),
        ("tritonserver", {"RANKER_TIMEOUT", "RANKER_UNAVAILABLE"}, "RETRIEVAL_ORDER"),
    ],
)
def test_each_dependency_down_degrades_then_recovers(
    stack, stub, precomputed, marker, reasons, source
):
    # Users served before (their vectors in the gateways' caches too) and
    # users never served: the same fallback either way.
    warm = ("1", "2", "3")
    for user_id in warm:
        full_answer(stub, user_id)
    with frozen(stack, marker):
        for user_id in (*warm, *FRESH_USERS[marker]):
            reply = degraded_by(stub, user_id, reasons)
            assert reply.degraded, marker
            assert REASON(reply.degraded_reason).removeprefix("DEGRADED_REASON_") in reasons
            assert pb.FallbackSource.Name(reply.fallback_source) == f"FALLBACK_SOURCE_{source}"
            assert len(reply.items) == 10
            assert all(i.title and i.categories for i in reply.items)
            if source == "PRECOMPUTED":
                assert [i.item_id for i in reply.items] == precomputed[user_id][:10]
            # The budget held: the stages together took about the request's
            # 100 ms, not the client's 2 s that the frozen one would have
            # (twice the budget: a busy host's loop runs late too).
            assert sum(t.duration_ms for t in reply.stage_timings) < 2 * 100
    reply = full_answer(stub, "1")
    assert not reply.degraded and reply.model_version


@pytest.mark.backends_apart
def test_without_features_the_attributes_sent_pick_the_list_for_users_like_them(stack, stub):
    """A known user's features unavailable: the attributes their request
    carries still pick their segment's list (the cold-start lists), not the
    popular one; a request without attributes gets the popular list."""
    from recserve_model import artifacts
    from recserve_model import segments as segment

    lists = json.loads((artifacts.current(stack.data_dir) / segment.FILE).read_text())["lists"]
    student = pb.UserAttributes(age=22, gender="F", occupation="student")
    reasons = {"FEATURES_TIMEOUT", "FEATURES_UNAVAILABLE"}
    full_answer(stub, "1")
    with frozen(stack, "services.features"):
        reply = degraded_by(stub, "1", reasons, attributes=student)
        assert REASON(reply.degraded_reason).removeprefix("DEGRADED_REASON_") in reasons
        assert pb.FallbackSource.Name(reply.fallback_source) == "FALLBACK_SOURCE_ATTRIBUTES"
        assert [i.item_id for i in reply.items] == lists[segment.key("F", 22, "student")][:10]
        plain = degraded_by(stub, "1", reasons)
        assert pb.FallbackSource.Name(plain.fallback_source) == "FALLBACK_SOURCE_POPULAR"
    assert not full_answer(stub, "1").degraded


def test_a_request_that_queued_too_long_is_shed_and_clients_cannot_forge_it(stack, stub):
    import time

    stale = (("x-request-start", f"{time.time() - 1.0:.6f}"),)  # queued a whole second
    with stack.internal_channel("gateway") as channel:
        direct = recommend_pb2_grpc.RecommendServiceStub(channel)
        reply = direct.Recommend(pb.RecommendRequest(user_id="42", k=10), metadata=stale)
    assert reply.degraded and REASON(reply.degraded_reason) == "DEGRADED_REASON_SHED"
    assert len(reply.items) == 10  # still an answer, at once
    # Through Envoy the header is Envoy's own: a client cannot make itself shed.
    # (A busy host may shed one for its own queue: asked again. A forged
    # header that worked would shed every one.)
    full_answer(stub)
    asked_until(
        lambda: stub.Recommend(pb.RecommendRequest(user_id="42", k=10), metadata=stale, timeout=2),
        lambda reply: REASON(reply.degraded_reason) != "DEGRADED_REASON_SHED",
        "an answer not shed",
    )


def test_a_request_that_queued_in_a_burst_is_not_shed(stack, stub):
    """Right after a request that found the queue empty, one that waited 50 ms
    before the gateway (past the 25 ms a standing queue may hold, inside the
    75 ms a burst's may) takes the full path: a burst's tail is not shed.
    Tried until the pair arrives within those 75 ms on a busy machine."""
    with stack.internal_channel("gateway") as channel:
        direct = recommend_pb2_grpc.RecommendServiceStub(channel)

        def pair_not_shed() -> bool:
            direct.Recommend(pb.RecommendRequest(user_id="7", k=10), timeout=2)  # none queued
            waited = (("x-request-start", f"{time.time() - 0.05:.6f}"),)
            request = pb.RecommendRequest(user_id="42", k=10)
            reply = direct.Recommend(request, metadata=waited, timeout=2)
            return REASON(reply.degraded_reason) != "DEGRADED_REASON_SHED"

        poll_until(pair_not_shed, 30, 0.05, "a request that queued 50 ms in a burst, not shed")


def gateway_metric(stack, name, replica=0):
    for line in stack.metrics("gateway", replica).splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


def gateways_metric(stack, name):
    """The sum over both gateways (Envoy spreads a burst across them)."""
    return gateway_metric(stack, name) + gateway_metric(stack, name, replica=1)


async def burst(stack, size, direct_to_gateway=False):
    """``size`` Recommends at once, through Envoy or to the gateway's own port."""
    if direct_to_gateway:
        channel = stack.internal_aio_channel("gateway")
    else:
        channel = grpc.aio.insecure_channel(stack.envoy_address)
    async with channel:
        direct = recommend_pb2_grpc.RecommendServiceStub(channel)
        calls = [
            direct.Recommend(pb.RecommendRequest(user_id=str(1 + n), k=10), timeout=5)
            for n in range(size)
        ]
        return await asyncio.gather(*calls)


@pytest.mark.backends_apart
def test_overload_is_shed_at_the_door_by_an_adaptive_bound(stack, stub):
    """A hung retriever holds every admitted request for its stage deadline
    and ends it with RETRIEVER_TIMEOUT, a sign of overload: the gateway's
    bound on requests in flight falls, and bursts past it are answered at
    once from the fallback (SHED). Nothing fails; every answer is whole."""
    full_answer(stub)
    reasons = []
    with frozen(stack, "services.retriever"):
        for _ in range(30):  # the bound falls by 10% at most once per 50 ms
            replies = asyncio.run(burst(stack, 32, direct_to_gateway=True))
            assert all(r.degraded and len(r.items) == 10 for r in replies)
            reasons += [REASON(r.degraded_reason) for r in replies]
        limit = gateway_metric(stack, "recserve_gateway_concurrency_limit")
    assert "DEGRADED_REASON_SHED" in reasons
    assert "DEGRADED_REASON_RETRIEVER_TIMEOUT" in reasons
    assert 2 <= limit < 32  # learned, within [min_in_flight, a burst]
    assert not full_answer(stub).degraded  # and full answers once it is back


def test_a_burst_after_a_quiet_spell_is_served_not_shed(stack, stub):
    """A page's carousels arrive together: 8 requests at once through Envoy,
    after the overload above cut the bound (test_overload_...: below 32) and a
    quiet spell. The bound recovered, so none is shed by it, and nothing
    fails. (Whether each answer is whole in time is the machine's speed: a
    request that waited past burst_queue_ms before the gateway is still shed,
    and that is not asserted here. 32 at once need more CPU than one core has
    in the 100 ms budget, see docs/benchmarks.md.)"""
    full_answer(stub)
    # The quiet spell: the bound is back at its maximum once no request has
    # been late for a second (it stayed at its floor before the fix).
    poll_until(
        lambda: gateway_metric(stack, "recserve_gateway_concurrency_limit") == 64,
        30,
        0.1,
        "the gateway's bound to recover",
    )
    bound = 'recserve_gateway_shed_total{cause="bound"}'
    before = gateways_metric(stack, bound)
    replies = asyncio.run(burst(stack, 8))
    assert len(replies) == 8 and all(len(r.items) == 10 for r in replies)
    assert gateways_metric(stack, bound) == before, "shed by the bound"


def test_admin_calls_need_a_token_and_soft_delete_applies(stack, stub):
    channel = grpc.insecure_channel(stack.envoy_address)
    retriever = retriever_pb2_grpc.RetrieverServiceStub(channel)
    target = full_answer(stub, "42").items[0].item_id
    request = rpb.DeleteItemsRequest(item_ids=[target], mode=rpb.DELETE_MODE_SOFT)
    with pytest.raises(grpc.RpcError) as raised:
        retriever.DeleteItems(request, timeout=5)
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as forged:
        retriever.DeleteItems(request, timeout=5, metadata=[("authorization", "Bearer x.y.z")])
    assert forged.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert target in {i.item_id for i in full_answer(stub, "42").items}  # nothing applied
    with pytest.raises(grpc.RpcError) as internal:
        retriever.Search(rpb.SearchRequest(vector=[0.1] * 64, k=1), timeout=5)
    assert internal.value.code() == grpc.StatusCode.UNIMPLEMENTED  # not routed publicly
    token = (stack.data_dir / "auth" / "admin.token").read_text().strip()
    reply = retriever.DeleteItems(
        request, timeout=5, metadata=[("authorization", f"Bearer {token}")]
    )
    assert reply.deleted == 1
    # Every gateway stops showing it: where each serves the whole request
    # path (one process per core), the others' retrievers follow the
    # writer's change feed within milliseconds.
    for gateway in stack.gateway_channels():
        door = recommend_pb2_grpc.RecommendServiceStub(gateway)

        def hidden(door=door) -> bool:
            return target not in {i.item_id for i in full_answer(door, "42").items}

        poll_until(hidden, 10, 0.01, f"item {target} hidden by every gateway")
        gateway.close()
    channel.close()


def test_a_crashed_triton_is_restarted_and_full_answers_return(stack, stub):
    """The runner restarts a component that dies (Compose: restart
    unless-stopped); meanwhile the gateway answers from the fallback."""
    full_answer(stub)
    restarts = stack.restarts()
    regions = stack.triton_shared_memory() if stack.kind == "local" else set()
    stack.kill("bin/tritonserver")
    reply = stub.Recommend(pb.RecommendRequest(user_id="42", k=10), timeout=2)
    assert len(reply.items) == 10  # an answer while Triton is away
    try:
        poll_until(lambda: stack.restarts() > restarts, 60, 0.5, "Triton to be restarted")
    except AssertionError as late:
        runner = stack.output().splitlines() if stack.kind == "local" else []
        said = [line for line in runner if "triton" in line.lower()]
        lines = "\n".join(said[-30:])
        raise AssertionError(f"{late}; the runner's last lines on Triton:\n{lines}") from None
    if stack.kind == "local":
        poll_until(lambda: "triton | ready again" in stack.output(), 180, 0.5, "Triton ready")
        assert "triton | exited with code -9; restarting (1 of 5" in stack.output()
        # The killed Triton's shared memory is gone (1 MiB a region, held
        # until reboot otherwise); the new Triton has its own.
        now = stack.triton_shared_memory()
        assert regions and now and not now & regions
    reply = full_answer(stub, timeout_s=60)
    assert reply.model_version and stack.restarts() == restarts + 1


def test_a_new_user_with_attributes_gets_the_list_for_users_like_them(stack, stub):
    """Cold start: an unknown user whose request carries sign-up
    attributes is served their segment's list from the artifact
    (cold_start.json), not the global popular list."""
    from recserve_model import artifacts
    from recserve_model import segments as segment

    lists = json.loads((artifacts.current(stack.data_dir) / segment.FILE).read_text())["lists"]
    student = pb.UserAttributes(age=22, gender="F", occupation="student")
    request = pb.RecommendRequest(user_id="new-user-y", k=10, attributes=student)
    reply = cold_start_answer(stub, request)
    assert pb.FallbackSource.Name(reply.fallback_source) == "FALLBACK_SOURCE_ATTRIBUTES"
    assert [i.item_id for i in reply.items] == lists[segment.key("F", 22, "student")][:10]
    assert all(i.title for i in reply.items)
    plain = cold_start_answer(stub, pb.RecommendRequest(user_id="new-user-y", k=10))
    assert pb.FallbackSource.Name(plain.fallback_source) == "FALLBACK_SOURCE_POPULAR"
    retired = pb.UserAttributes(age=70, gender="M", occupation="retired")
    other = cold_start_answer(
        stub, pb.RecommendRequest(user_id="new-user-z", k=10, attributes=retired)
    )
    assert [i.item_id for i in other.items] == lists[segment.key("M", 70, "retired")][:10]
    assert [i.item_id for i in other.items] != [i.item_id for i in reply.items]
    # A category filter keeps to the category; an unknown occupation is "other".
    comedy = pb.RecommendRequest(
        user_id="new-user-y", k=10, attributes=student, filter=pb.ItemFilter(categories=["Comedy"])
    )
    assert all("Comedy" in i.categories for i in stub.Recommend(comedy, timeout=2).items)
    astronaut = pb.UserAttributes(age=22, gender="F", occupation="astronaut")
    unusual = cold_start_answer(
        stub, pb.RecommendRequest(user_id="new-user-y", k=10, attributes=astronaut)
    )
    assert [i.item_id for i in unusual.items] == lists[segment.key("F", 22, "other")][:10]
    # Attributes of a known user change nothing: their own history decides.
    known = full_answer(stub, "42", attributes=student)
    assert known.model_version and not known.degraded


@pytest.mark.parametrize(
    ("attributes", "field"),
    [
        (pb.UserAttributes(age=0, gender="F", occupation="student"), "attributes.age"),
        (pb.UserAttributes(age=30, gender="x", occupation="student"), "attributes.gender"),
        (pb.UserAttributes(age=30, gender="M", occupation=""), "attributes.occupation"),
    ],
)
def test_bad_attributes_are_invalid_argument(stub, attributes, field):
    request = pb.RecommendRequest(user_id="new-user-y", k=5, attributes=attributes)
    with pytest.raises(grpc.RpcError) as raised:
        stub.Recommend(request, timeout=2)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith(field)
