"""Access control at the kit: a service port with the stack's mutual TLS
takes only callers holding a certificate of the stack's CA, a Unix socket
beside it only processes of the stack's user, and an admin RPC needs the
admin token even from such a caller."""

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc
import pytest
from pydantic import ValidationError

from recserve.features.v1 import features_pb2, features_pb2_grpc
from recserve_kit import transport
from recserve_kit.call_stream import CallStream
from recserve_kit.clients import client
from recserve_kit.config import ServiceSettings
from recserve_kit.server import Registration, build_server
from recserve_kit.transport import Tls
from recserve_stack import auth, pki
from tests.helpers import PERMISSION_DENIED, connect_as_nobody

SERVICE = "recserve.features.v1.FeatureService"


class Features(features_pb2_grpc.FeatureServiceServicer):
    def __init__(self) -> None:
        self.pushed = 0

    async def GetUserFeatures(self, request, context):
        return features_pb2.GetUserFeaturesResponse(
            user=features_pb2.UserFeatures(user_id=request.user_id, found=True)
        )

    async def PushUserEvents(self, request, context):
        self.pushed += len(request.events)
        return features_pb2.PushUserEventsResponse(accepted=len(request.events))


@pytest.fixture
def secrets(tmp_path):
    tls_dir = pki.ensure_pki(tmp_path / "tls")
    jwks = auth.ensure_keys(tmp_path / "auth")
    return tls_dir, jwks, tmp_path / "auth"


@pytest.fixture
async def secured(secrets):
    tls_dir, jwks, _ = secrets
    settings = ServiceSettings(port=0, tls_dir=tls_dir, admin_jwks=jwks, shutdown_drain_s=0)
    servicer = Features()
    registration = Registration(servicer, SERVICE, admin_methods=frozenset({"PushUserEvents"}))
    service = build_server("features", settings, [registration])
    await service.start()
    try:
        yield service, servicer
    finally:
        await service.stop(0)


async def get_user(channel: grpc.aio.Channel):
    stub = features_pb2_grpc.FeatureServiceStub(channel)
    return await stub.GetUserFeatures(features_pb2.GetUserFeaturesRequest(user_id="42"), timeout=5)


def push_request():
    event = features_pb2.UserEvent(user_id="42", item_id="1", rating=4.0)
    return features_pb2.PushUserEventsRequest(events=[event])


async def test_only_certificates_of_the_stacks_ca_get_in(secured, secrets, tmp_path):
    service, _ = secured
    tls_dir = secrets[0]
    refused = [
        grpc.aio.insecure_channel(service.address),  # plaintext
        # TLS, trusting the server, but with no client certificate
        grpc.aio.secure_channel(
            service.address, grpc.ssl_channel_credentials(Tls.load(tls_dir, "operator").ca)
        ),
    ]
    other_ca = pki.ensure_pki(tmp_path / "other")
    own_ca = Tls.load(tls_dir, "operator").ca
    stranger = Tls.load(other_ca, "operator")
    # A certificate of another CA, trusting ours: the handshake must fail.
    refused.append(transport.aio_channel(service.address, Tls(own_ca, stranger.cert, stranger.key)))
    for channel in refused:
        async with channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await get_user(channel)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    async with transport.aio_channel(service.address, Tls.load(tls_dir, "operator")) as channel:
        assert (await get_user(channel)).user.found


async def test_admin_rpcs_verify_the_token_inside_the_service(secured, secrets, tmp_path):
    service, servicer = secured
    tls_dir, _, auth_dir = secrets
    forged_dir = tmp_path / "forged"
    auth.ensure_keys(forged_dir)  # a key set that is not the stack's
    tokens = {
        "missing": None,
        "not a bearer": "Basic YWRtaW46YWRtaW4=",
        "garbage": "Bearer not-a-jwt",
        "another key": f"Bearer {auth.mint_token(forged_dir)}",
        "expired": f"Bearer {auth.mint_token(auth_dir, ttl_s=-60)}",
    }
    async with transport.aio_channel(service.address, Tls.load(tls_dir, "operator")) as channel:
        stream = CallStream(channel)
        unary = features_pb2_grpc.FeatureServiceStub(channel)
        # The same checks for a call sent as a frame on a held stream.
        framed = client(
            features_pb2_grpc.FeatureServiceStub, channel, SERVICE, stream, ["PushUserEvents"]
        )
        for how, stub in (("unary", unary), ("frame", framed)):
            for what, header in tokens.items():
                metadata = (("authorization", header),) if header else ()
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.PushUserEvents(push_request(), metadata=metadata, timeout=5)
                assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, (how, what)
                assert "admin call" in caught.value.details(), (how, what)
        assert servicer.pushed == 0
        token = (auth_dir / "admin.token").read_text()
        for pushed, stub in enumerate((unary, framed), 1):
            reply = await stub.PushUserEvents(
                push_request(), metadata=(("authorization", f"Bearer {token}"),), timeout=5
            )
            assert reply.accepted == 1 and servicer.pushed == pushed
        stream.close()
        # Read RPCs need no token.
        assert (await get_user(channel)).user.found


def test_plaintext_only_on_loopback_and_tls_needs_the_admin_key_set(secrets):
    tls_dir, jwks, _ = secrets
    with pytest.raises(ValidationError, match="plaintext is allowed on loopback only"):
        ServiceSettings(host="0.0.0.0")
    with pytest.raises(ValidationError, match="ADMIN_JWKS is required"):
        ServiceSettings(host="0.0.0.0", tls_dir=tls_dir)
    assert ServiceSettings(host="0.0.0.0", tls_dir=tls_dir, admin_jwks=jwks).tls("gateway")
    assert ServiceSettings().tls("gateway") is None


def test_certificates_are_made_once_and_replaced_when_not_the_cas(tmp_path):
    tls_dir = pki.ensure_pki(tmp_path / "tls")
    first = (tls_dir / "gateway.pem").read_bytes()
    assert pki.ensure_pki(tls_dir) and (tls_dir / "gateway.pem").read_bytes() == first
    assert (tls_dir / "gateway.key").stat().st_mode & 0o077 == 0
    other = pki.ensure_pki(tmp_path / "other")
    (tls_dir / "gateway.pem").write_bytes((other / "gateway.pem").read_bytes())
    pki.ensure_pki(tls_dir)
    renewed = (tls_dir / "gateway.pem").read_bytes()
    assert renewed not in (first, (other / "gateway.pem").read_bytes())


async def test_the_container_healthcheck_calls_with_the_operators_certificate(secured, secrets):
    service, _ = secured
    base = [sys.executable, "-m", "recserve_kit.healthcheck", service.address]

    def exit_code(*extra: str) -> int:
        return subprocess.run([*base, *extra], capture_output=True).returncode

    assert await asyncio.to_thread(exit_code) == 1  # plaintext is refused
    assert await asyncio.to_thread(exit_code, "--tls-dir", str(secrets[0])) == 0


@pytest.fixture
def open_parent():
    """A directory every user may pass through (pytest's own is its user's),
    so that only the sockets' directory decides who gets in."""
    parent = Path(tempfile.mkdtemp(prefix="recserve-sockets-"))
    parent.chmod(0o755)
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture
async def on_a_socket(secrets, open_parent):
    """A service with mutual TLS on its port and a Unix socket beside it."""
    tls_dir, jwks, _ = secrets
    socket_path = open_parent / "sockets" / "features.sock"
    settings = ServiceSettings(
        port=0, tls_dir=tls_dir, admin_jwks=jwks, socket=socket_path, shutdown_drain_s=0
    )
    servicer = Features()
    registration = Registration(servicer, SERVICE, admin_methods=frozenset({"PushUserEvents"}))
    service = build_server("features", settings, [registration])
    await service.start()
    try:
        yield service, servicer, socket_path
    finally:
        await service.stop(0)


async def test_a_socket_answers_its_own_user_and_still_checks_admin_tokens(on_a_socket, secrets):
    service, servicer, socket_path = on_a_socket
    assert socket_path.parent.stat().st_mode & 0o777 == 0o700
    async with transport.aio_channel(f"unix:{socket_path}", None) as channel:
        assert (await get_user(channel)).user.found
        stub = features_pb2_grpc.FeatureServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.PushUserEvents(push_request(), timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert servicer.pushed == 0
        token = (secrets[2] / "admin.token").read_text()
        reply = await stub.PushUserEvents(
            push_request(), metadata=(("authorization", f"Bearer {token}"),), timeout=5
        )
        assert reply.accepted == 1
    # The port beside it still takes only the stack's certificates.
    async with grpc.aio.insecure_channel(service.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await get_user(channel)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.skipif(os.getuid() != 0, reason="acting as another user needs root")
async def test_another_user_cannot_open_the_socket(on_a_socket):
    _, _, socket_path = on_a_socket
    assert await asyncio.to_thread(connect_as_nobody, socket_path) == PERMISSION_DENIED
    # The check is the directory's: opened to others, the same user gets in.
    socket_path.parent.chmod(0o755)
    socket_path.chmod(0o777)
    assert await asyncio.to_thread(connect_as_nobody, socket_path) == 0


def test_sockets_are_refused_in_a_directory_others_can_open(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    with pytest.raises(PermissionError, match="open to other users"):
        transport.unix_listener(shared / "features.sock")
    with pytest.raises(ValueError, match="longer than 107 bytes"):
        transport.unix_listener(tmp_path / ("x" * 120) / "features.sock")
    made = transport.unix_listener(tmp_path / "own" / "features.sock")
    assert made == f"unix:{tmp_path / 'own' / 'features.sock'}"
    assert (tmp_path / "own").stat().st_mode & 0o777 == 0o700
