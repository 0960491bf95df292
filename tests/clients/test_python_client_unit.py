"""The Python client against an in-process server: the retry policy, the
errors, the typed results, tokens, the CLI. No stack needed."""

from __future__ import annotations

import json
import threading
from concurrent import futures
from contextlib import ExitStack

import grpc
import pytest
from recserve_client import (
    AsyncRecserveClient,
    ClientOptions,
    InvalidRequest,
    NotFound,
    RecserveClient,
    RetryPolicy,
    TlsOptions,
    Unavailable,
    UserAttributes,
    cli,
)
from recserve_client.channel import channel_state, is_loopback, transport_tls
from recserve_client.options import CA_FILE_VARIABLE

from tests.clients.fake_server import fake_server
from tests.helpers import poll_until

CODE = grpc.StatusCode


def test_typed_results_with_explanations_and_timings():
    with fake_server() as (target, _), RecserveClient(target) as client:
        answer = client.recommend("42", k=3, debug=True, request_id="r1")
        assert answer.request_id == "r1" and answer.model_version == "m1"
        assert answer.item_ids == ["1", "2", "3"] and not answer.degraded
        first = answer.items[0]
        assert first.title == "Item 1" and first.categories == ("Drama",)
        assert first.explanation is not None and first.explanation.stage == "rank"
        assert first.explanation.retrieval_rank == 1
        assert [(t.stage, t.duration_ms) for t in answer.stage_timings] == [("features", 1.5)]
        assert answer.recommendation_id is None  # until the service issues one
        assert json.loads(json.dumps(answer.to_dict()))["items"][0]["explanation"]["stage"]
        plain = client.recommend("42", k=2)
        assert plain.items[0].explanation is None and not plain.stage_timings
        cold = client.recommend("new-1", k=2, attributes=UserAttributes(30, "F", "writer"))
        assert cold.degraded and cold.degraded_reason == "COLD_START"
        assert cold.fallback_source == "POPULAR"
        similar = client.similar_items("1", k=4)
        assert len(similar.items) == 4 and similar.fallback_source is None


def test_unavailable_is_retried_by_the_channel_within_one_call():
    with fake_server() as (target, script), RecserveClient(target) as client:
        script.actions = [("fail", CODE.UNAVAILABLE, "down"), ("fail", CODE.UNAVAILABLE, "down")]
        assert len(client.recommend("42", k=2).items) == 2
        assert len(script.attempts) == 3


def test_a_hung_attempt_is_abandoned_and_sent_again():
    with fake_server() as (target, script), RecserveClient(target) as client:
        script.actions = [("hang", 2.0)]
        assert len(client.recommend("42", k=2).items) == 2
        # Two attempts: the first, hung, was abandoned rather than waited for.
        assert len(script.attempts) == 2


def test_one_hung_replica_of_two_never_exhausts_the_retry_throttle():
    """Every other call meets a hung attempt: each is abandoned and answered on
    the next, and the throttle (one token per failure, one back per answer)
    never stops the retries."""
    with fake_server() as (target, script), RecserveClient(target) as client:
        for _ in range(12):
            script.actions = [("hang", 0.5)]
            assert len(client.recommend("42", k=1).items) == 1
            assert len(client.recommend("42", k=1).items) == 1
        assert len(script.attempts) == 36


@pytest.mark.parametrize(
    "code, kind", [(CODE.INVALID_ARGUMENT, InvalidRequest), (CODE.NOT_FOUND, NotFound)]
)
def test_client_errors_raise_at_once_unretried(code, kind):
    with fake_server() as (target, script), RecserveClient(target) as client:
        script.actions = [("fail", code, "filter.exclude_item_ids[1]: may hold only ASCII")]
        with pytest.raises(kind) as raised:
            client.recommend("42", k=5)
        assert len(script.attempts) == 1
        assert raised.value.code == code.name
    if kind is InvalidRequest:
        assert raised.value.field == "filter.exclude_item_ids[1]"
        assert raised.value.problem == "may hold only ASCII"


def test_a_read_waits_for_a_server_coming_back_within_its_deadline():
    """The ingress restarting (Envoy is back in about 0.2 s): a read waits
    for the connection made again, where one that fails fast raises
    UNAVAILABLE at once (before, every call of a default client failed for
    1.2 s of such a restart)."""
    with fake_server() as (target, _):
        pass  # a port that was just served, and is not now
    fail_fast = ClientOptions(wait_for_ready=False)
    with RecserveClient(target, fail_fast) as client, pytest.raises(Unavailable):
        client.recommend("42", k=2)
    # The default waits, and says for what when none came: not a slow answer.
    unreachable = f"no connection to {target} within 0.5 s"
    with (
        RecserveClient(target, ClientOptions(timeout_s=0.5)) as waiting,
        pytest.raises(Unavailable, match=unreachable),
    ):
        waiting.recommend("42", k=2)
    refused: list[bool] = []
    with ExitStack() as stack, RecserveClient(target, ClientOptions(timeout_s=5.0)) as client:

        def come_back_once_refused() -> None:
            # The call has tried and found nothing there: it is waiting.
            waiting = grpc.ChannelConnectivity.TRANSIENT_FAILURE
            refused.append(poll_until(lambda: channel_state(client.channel) is waiting, 5, 0.01))
            stack.enter_context(fake_server(int(target.rsplit(":", 1)[1])))

        restart = threading.Thread(target=come_back_once_refused)
        restart.start()
        try:
            assert len(client.recommend("42", k=2).items) == 2
        finally:
            restart.join()
        assert refused == [True]  # it was answered by the server that came back


def test_every_call_in_flight_failing_at_once_is_retried():
    """An ingress restart fails every call in flight together: each gets
    its retry (at 10 tokens, retries stopped after the fifth failure)."""
    with fake_server() as (target, script), RecserveClient(target) as client:
        script.actions = [("fail", CODE.UNAVAILABLE, "reset")] * 16
        with futures.ThreadPoolExecutor(max_workers=16) as pool:
            answers = list(pool.map(lambda n: client.recommend(str(n), k=1), range(16)))
        assert all(len(a.items) == 1 for a in answers)
        assert len(script.attempts) == 32


def test_retries_stop_at_the_deadline_and_raise_unavailable():
    with fake_server() as (target, script), RecserveClient(target) as client:
        script.actions = [("fail", CODE.UNAVAILABLE, "down")] * 5
        with pytest.raises(Unavailable):
            client.recommend("42", k=2)
        assert len(script.attempts) == 3  # max_attempts


def test_without_a_policy_nothing_is_retried():
    options = ClientOptions(retry=None)
    with fake_server() as (target, script), RecserveClient(target, options) as client:
        script.actions = [("fail", CODE.UNAVAILABLE, "down")]
        with pytest.raises(Unavailable):
            client.recommend("42", k=2)
        assert len(script.attempts) == 1


def test_a_policy_cannot_retry_client_errors():
    with pytest.raises(ValueError, match="never be retried"):
        RetryPolicy(retryable_codes=("UNAVAILABLE", "INVALID_ARGUMENT"))
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=9)


def test_the_token_is_sent_and_kept_off_plaintext_to_other_hosts():
    with fake_server() as (target, script):
        with RecserveClient(target, ClientOptions(token="t0k")) as client:
            client.recommend("42", k=1)
        assert script.attempts[0][1]["authorization"] == "Bearer t0k"
        assert "recserve-client-python/" in script.attempts[0][1]["user-agent"]
    # Off loopback a client is TLS unless told otherwise; told, it keeps the token.
    with pytest.raises(ValueError, match="TLS"):
        RecserveClient("recserve.example:8080", ClientOptions(token="t0k", plaintext=True))
    RecserveClient("recserve.example:8080", ClientOptions(token="t0k")).close()
    assert is_loopback("127.0.0.1:8080") and is_loopback("localhost:1")
    assert is_loopback("[::1]:8080") and not is_loopback("10.0.0.1:8080")


def test_tls_by_default_off_loopback_with_the_ca_the_environment_names(tmp_path, monkeypatch):
    monkeypatch.delenv(CA_FILE_VARIABLE, raising=False)
    assert transport_tls("recs.example.com:443", ClientOptions()) == TlsOptions()  # system CAs
    assert transport_tls("127.0.0.1:8080", ClientOptions()) is None
    assert transport_tls("localhost:8080", ClientOptions()) is None
    assert transport_tls("10.0.0.1:8080", ClientOptions(plaintext=True)) is None
    given = TlsOptions(server_name="recs.example.com")
    assert transport_tls("127.0.0.1:8443", ClientOptions(tls=given)) is given
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----")
    monkeypatch.setenv(CA_FILE_VARIABLE, str(ca))
    tls = transport_tls("recs.example.com:443", ClientOptions())
    assert tls is not None and tls.root_certificates == ca.read_bytes()
    with pytest.raises(ValueError, match="one or the other"):
        ClientOptions(tls=given, plaintext=True)


def test_a_tls_client_against_a_plaintext_server_sends_it_nothing():
    """The handshake fails before any request: the server never sees the token."""
    with fake_server() as (target, script):
        options = ClientOptions(tls=TlsOptions(), token="t0k", retry=None)
        with RecserveClient(target, options) as client, pytest.raises(Unavailable):
            client.recommend("42", k=1, timeout_s=2)
        assert script.attempts == []


async def test_the_asyncio_client_has_the_same_policy():
    with fake_server() as (target, script):
        async with AsyncRecserveClient(target) as client:
            script.actions = [("hang", 2.0)]
            answer = await client.recommend("42", k=2, debug=True)
            assert answer.items[0].explanation is not None
            assert len(script.attempts) == 2
            script.actions = [("fail", CODE.INVALID_ARGUMENT, "k: must be 1 to 100")]
            with pytest.raises(InvalidRequest) as raised:
                await client.similar_items("1", k=0)
            assert raised.value.field == "k" and len(script.attempts) == 3


def test_the_cli(capsys):
    with fake_server() as (target, script):
        assert cli.main(["recommend", "--user", "42", "--k", "2", "--target", target]) == 0
        assert "Item 2" in capsys.readouterr().out
        args = ["similar", "--item", "1", "--k", "3", "--json", "--debug", "--target", target]
        assert cli.main(args) == 0
        assert len(json.loads(capsys.readouterr().out)["items"]) == 3
        script.actions = [("fail", CODE.INVALID_ARGUMENT, "k: must be 1 to 100")]
        assert cli.main(["recommend", "--user", "42", "--k", "0", "--target", target]) == 2
        assert "bad request: k: must be 1 to 100" in capsys.readouterr().err
