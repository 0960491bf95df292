"""TLS at the public edge: an app backend on another host reaches Envoy's TLS
listener with its app token through the Python client, and the client keeps
its token off plaintext to anything but loopback.

"Another host" is this machine under its host name: the client judges the
name (not loopback), while the connection stays on loopback, as every test here."""

import json
import socket
import ssl
import urllib.request

import pytest
from recserve_client import ClientOptions, Event, RecserveClient, TlsOptions, Unavailable
from recserve_client.options import CA_FILE_VARIABLE

from tests.helpers import poll_until


def full(client: RecserveClient, user_id: str = "42"):
    """A Recommend answered in full (not degraded), asked again meanwhile."""

    def attempt():
        answer = client.recommend(user_id, k=5)
        return None if answer.degraded else answer

    return poll_until(attempt, 60, 0.2, "a full answer through the TLS edge")


def app_token(stack) -> str:
    return (stack.data_dir / "auth" / "app.token").read_text().strip()


def rating(event_id: str) -> Event:
    return Event(event_id, "42", "1", "rating", value=4.0)


def host_name() -> str:
    """This machine's name, where it resolves to loopback (tests stay there)."""
    name = socket.gethostname()
    if name == "localhost" or not socket.gethostbyname(name).startswith("127."):
        pytest.skip(f"{name} does not resolve to a loopback address here")
    return name


def test_the_tls_edge_serves_recommendations_and_events_with_the_app_token(stack):
    options = ClientOptions(tls=TlsOptions.from_files(ca=stack.edge_ca), token=app_token(stack))
    with RecserveClient(stack.edge_address, options) as client:
        assert len(full(client).items) == 5
        pushed = client.push_events([rating(f"edge-tls-{stack.kind}-1")])
        assert pushed.accepted + pushed.duplicates == 1
    # JSON callers too, over HTTP/1.1 with TLS.
    context = ssl.create_default_context(cafile=str(stack.edge_ca))
    request = urllib.request.Request(
        f"https://{stack.edge_address}/v1/recommend",
        data=json.dumps({"user_id": "42", "k": 3}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5, context=context) as reply:
        assert len(json.loads(reply.read())["items"]) == 3


@pytest.mark.local_stack_only  # the generated certificate names this machine
def test_off_loopback_the_client_is_tls_by_default_with_the_named_ca(stack, monkeypatch):
    name, port = host_name(), stack.port("edge")
    monkeypatch.setenv(CA_FILE_VARIABLE, str(stack.edge_ca))
    with RecserveClient(f"{name}:{port}", ClientOptions(token=app_token(stack))) as client:
        assert len(full(client).items) == 5
        pushed = client.push_events([rating(f"edge-tls-{stack.kind}-2")])
        assert pushed.accepted + pushed.duplicates == 1


# Envoy's token checks: a bearer token that reached Envoy is counted in one.
TOKEN_CHECKS = ("http.ingress.jwt_authn.allowed", "http.ingress.jwt_authn.denied")


@pytest.mark.local_stack_only  # reads Envoy's admin counters
def test_off_loopback_over_plaintext_the_token_never_leaves(stack, monkeypatch):
    """Envoy's plaintext listener under a name that is not loopback: told to
    use plaintext, the client refuses the token before it connects; left to
    its default, it speaks TLS, the handshake fails, and no token reaches Envoy."""
    target = f"{host_name()}:{stack.port('envoy')}"
    token = app_token(stack)
    with pytest.raises(ValueError, match="TLS"):
        RecserveClient(target, ClientOptions(token=token, plaintext=True))
    monkeypatch.setenv(CA_FILE_VARIABLE, str(stack.edge_ca))
    before = envoy_counters(stack)
    options = ClientOptions(token=token, retry=None)
    with RecserveClient(target, options) as client, pytest.raises(Unavailable):
        client.push_events([rating(f"edge-tls-{stack.kind}-3")], timeout_s=2)
    assert envoy_counters(stack) == before
    # The witness works: the same call through the TLS listener is checked.
    with RecserveClient(
        f"{host_name()}:{stack.port('edge')}", ClientOptions(token=token)
    ) as client:
        client.push_events([rating(f"edge-tls-{stack.kind}-3")])
    after = envoy_counters(stack)
    assert after[TOKEN_CHECKS[0]] == before[TOKEN_CHECKS[0]] + 1


def envoy_counters(stack) -> dict[str, int]:
    url = f"http://127.0.0.1:{stack.port('envoy_admin')}/stats?filter=jwt_authn"
    with urllib.request.urlopen(url, timeout=5) as reply:
        lines = reply.read().decode().splitlines()
    values = dict(line.split(": ", 1) for line in lines if ": " in line)
    return {name: int(values.get(name, "0")) for name in TOKEN_CHECKS}
