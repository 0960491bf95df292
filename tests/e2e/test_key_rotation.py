"""Token rotation and revocation on the running stack, with no restart:
`keys rotate` mints tokens with the key published ahead, which the running
Envoy already trusts, while the tokens handed out before keep working;
`keys revoke` drops the old key and the services refuse its tokens at once
(Envoy, which read jwks.json at start, still passes them on)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from typer.testing import CliRunner

from recserve.ranker.v1 import ranker_pb2 as kpb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve.recommend.v1 import events_pb2 as epb
from recserve.recommend.v1 import events_pb2_grpc
from recserve_stack import auth
from recserve_stack.keys_cli import app as keys_app
from tests.helpers import poll_until

# Rotates the keys of the local stack's data directory (and puts them back).
pytestmark = pytest.mark.local_stack_only


@pytest.fixture
def restored_keys(stack) -> Iterator[Path]:
    """The stack's auth directory, put back as it was afterwards (the other
    tests read its tokens), and the stack seen accepting them again."""
    auth_dir = stack.data_dir / "auth"
    saved = {path: (path.read_bytes(), path.stat().st_mode & 0o777) for path in auth_dir.iterdir()}
    yield auth_dir
    for path in auth_dir.iterdir():
        if path not in saved:
            path.unlink()
    for path, (data, mode) in saved.items():
        auth.write_atomic(path, data, mode)
    token = bearer(auth_dir / "app.token")
    with grpc.insecure_channel(stack.envoy_address) as channel:
        events = events_pb2_grpc.EventServiceStub(channel)
        poll_until(lambda: accepted(events, token), timeout_s=10)


def bearer(path: Path) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {path.read_text().strip()}")]


def push(events, token, event_id: str = "") -> epb.PushEventsResponse:
    event = epb.AppEvent(
        event_id=event_id or f"rotation-{uuid.uuid4().hex[:12]}",
        user_id="42",
        item_id="50",
        event_type="rating",
        value=4.0,
    )
    return events.PushEvents(epb.PushEventsRequest(events=[event]), metadata=token, timeout=5)


def accepted(events, token) -> bool:
    try:
        return push(events, token).accepted == 1
    except grpc.RpcError:
        return False


def refused(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code()


def test_tokens_rotate_and_an_old_key_is_revoked_with_no_restart(stack, restored_keys):
    auth_dir = restored_keys
    data_dir = ["--data-dir", str(stack.data_dir)]
    envoy_admin = ["--envoy-admin", f"http://127.0.0.1:{stack.port('envoy_admin')}"]
    old_app, old_admin = bearer(auth_dir / "app.token"), bearer(auth_dir / "admin.token")
    before = auth.open_key_set(auth_dir)
    restarts = stack.restarts()
    runner = CliRunner()
    rotated = runner.invoke(keys_app, ["rotate", *data_dir, *envoy_admin])
    assert rotated.exit_code == 0, rotated.output
    assert "it trusts the new tokens" in rotated.output  # Envoy started after the next key
    new_app, new_admin = bearer(auth_dir / "app.token"), bearer(auth_dir / "admin.token")
    assert auth.token_info(auth_dir / "app.token").kid == before.next
    with grpc.insecure_channel(stack.envoy_address) as channel:
        events = events_pb2_grpc.EventServiceStub(channel)
        ranker = ranker_pb2_grpc.RankerServiceStub(channel)

        def rollout(token) -> kpb.RolloutStatus:
            return ranker.GetRollout(kpb.GetRolloutRequest(), metadata=token, timeout=5)

        # Through Envoy, into the gateway and the ranker: both generations pass.
        assert push(events, new_app).accepted == 1
        assert push(events, old_app).accepted == 1
        rollout(new_admin), rollout(old_admin)
        # A second rotation would sign with a key this Envoy never read.
        again = runner.invoke(keys_app, ["rotate", *data_dir, *envoy_admin])
        assert again.exit_code == 1 and "Restart Envoy first" in again.output
        revoked = runner.invoke(keys_app, ["revoke", before.signing, *data_dir])
        assert revoked.exit_code == 0, revoked.output
        # Envoy still knows the key; the services refuse it at once, and do nothing.
        event_id = f"rotation-{uuid.uuid4().hex[:12]}"
        assert refused(lambda: push(events, old_app, event_id)) == grpc.StatusCode.UNAUTHENTICATED
        assert refused(lambda: rollout(old_admin)) == grpc.StatusCode.UNAUTHENTICATED
        reply = push(events, new_app, event_id)
        assert (reply.accepted, reply.duplicates) == (1, 0)  # the refused call kept nothing
        rollout(new_admin)
    assert stack.restarts() == restarts  # no component was restarted
