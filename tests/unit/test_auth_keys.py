"""The admin and app tokens' key set (recserve_stack.auth, `keys ...`) and
the services' verifier reading it again (recserve_kit.admin): a rotation
keeps the tokens handed out valid and mints new ones with the key published
ahead; a revocation is refused by a verifier made before it, with no
restart; a half-written key set keeps the last good one; a directory of one
key (before generations) is migrated with its tokens valid."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from typer.testing import CliRunner

from recserve_kit.admin import APP_AUDIENCE, AUDIENCE, ISSUER, AdminTokens
from recserve_kit.errors import Unauthenticated
from recserve_stack import auth
from recserve_stack.keys_cli import app as keys_app


def bearer(path: Path) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {path.read_text().strip()}")]


def kid(path: Path) -> str:
    return auth.token_info(path).kid


def published(auth_dir: Path) -> list[str]:
    return [key["kid"] for key in json.loads((auth_dir / "jwks.json").read_text())["keys"]]


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.fixture
def auth_dir(tmp_path: Path) -> Path:
    auth.ensure_keys(tmp_path / "auth")
    return tmp_path / "auth"


def test_a_new_key_set_signs_with_one_key_and_publishes_the_next(auth_dir: Path):
    keys = auth.open_key_set(auth_dir)
    assert (keys.signing, keys.next) == ("recserve-admin-1", "recserve-admin-2")
    assert published(auth_dir) == ["recserve-admin-1", "recserve-admin-2"]
    assert kid(auth_dir / "admin.token") == kid(auth_dir / "app.token") == "recserve-admin-1"
    for name in ("recserve-admin-1.pem", "recserve-admin-2.pem", "keys.json", "app.token"):
        assert mode(auth_dir / name) == 0o600, name
    assert mode(auth_dir / "jwks.json") == 0o644  # public; Envoy reads it
    before = {path.name: path.read_bytes() for path in auth_dir.iterdir()}
    auth.ensure_keys(auth_dir)  # a rerun (the runner's next start) changes nothing
    assert {path.name: path.read_bytes() for path in auth_dir.iterdir()} == before


def test_rotate_keeps_old_tokens_valid_and_mints_new_ones_with_the_next_key(auth_dir: Path):
    admin, app = (
        AdminTokens(auth_dir / "jwks.json"),
        AdminTokens(auth_dir / "jwks.json", APP_AUDIENCE),
    )
    old_app, old_admin = bearer(auth_dir / "app.token"), bearer(auth_dir / "admin.token")
    rotation = auth.rotate(auth_dir)
    assert (rotation.retired, rotation.signing, rotation.next) == (
        "recserve-admin-1",
        "recserve-admin-2",
        "recserve-admin-3",
    )
    assert kid(auth_dir / "admin.token") == kid(auth_dir / "app.token") == "recserve-admin-2"
    assert published(auth_dir) == ["recserve-admin-1", "recserve-admin-2", "recserve-admin-3"]
    # The same verifiers, made before: old and new tokens both pass.
    assert app.verify(old_app) == app.verify(bearer(auth_dir / "app.token")) == "app"
    assert admin.verify(old_admin) == admin.verify(bearer(auth_dir / "admin.token")) == "admin"
    with pytest.raises(Unauthenticated):
        admin.verify(bearer(auth_dir / "app.token"))  # audiences stay apart
    # The retired key verifies only: its private half is gone.
    assert sorted(p.name for p in auth_dir.glob("*.pem")) == [
        "recserve-admin-2.pem",
        "recserve-admin-3.pem",
    ]
    assert mode(auth_dir / "app.token") == 0o600 and mode(auth_dir / "jwks.json") == 0o644
    assert not [p.name for p in auth_dir.iterdir() if p.name.startswith(".")]  # no temp left
    assert auth.rotate(auth_dir).signing == "recserve-admin-3"


def test_a_revoked_keys_tokens_are_refused_by_a_verifier_made_before(auth_dir: Path):
    app = AdminTokens(auth_dir / "jwks.json", APP_AUDIENCE, "app call")
    old = bearer(auth_dir / "app.token")
    auth.rotate(auth_dir)
    new = bearer(auth_dir / "app.token")
    assert app.verify(old) == "app"
    auth.revoke(auth_dir, "recserve-admin-1")
    assert published(auth_dir) == ["recserve-admin-2", "recserve-admin-3"]
    with pytest.raises(Unauthenticated, match="not in the key set"):
        app.verify(old)
    assert app.verify(new) == "app"
    keys = auth.open_key_set(auth_dir)
    assert keys.role("recserve-admin-1") == "revoked" and keys.keys["recserve-admin-1"].jwk == {}
    # A later ensure (the runner's next start) leaves it revoked.
    auth.ensure_keys(auth_dir)
    assert "recserve-admin-1" not in published(auth_dir)


def test_revoke_refuses_the_signing_key_and_an_unknown_one_and_replaces_the_next(
    auth_dir: Path,
):
    jwks = (auth_dir / "jwks.json").read_bytes()
    with pytest.raises(auth.KeySetError, match=r"signing key.*rotate"):
        auth.revoke(auth_dir, "recserve-admin-1")  # also the only key tokens are signed with
    with pytest.raises(auth.KeySetError, match="no key 'nope'"):
        auth.revoke(auth_dir, "nope")
    assert (auth_dir / "jwks.json").read_bytes() == jwks  # nothing changed
    keys = auth.revoke(auth_dir, "recserve-admin-2")  # the next key, say, leaked
    assert keys.next == "recserve-admin-3"
    assert published(auth_dir) == ["recserve-admin-1", "recserve-admin-3"]
    assert not (auth_dir / "recserve-admin-2.pem").exists()
    with pytest.raises(auth.KeySetError, match="already revoked"):
        auth.revoke(auth_dir, "recserve-admin-2")
    assert auth.rotate(auth_dir).signing == "recserve-admin-3"  # a kid is never reused
    assert auth.open_key_set(auth_dir).next == "recserve-admin-4"


def test_a_half_written_or_missing_key_set_keeps_the_last_good_one(
    auth_dir: Path, caplog: pytest.LogCaptureFixture
):
    jwks = auth_dir / "jwks.json"
    tokens = AdminTokens(jwks, APP_AUDIENCE)
    token = bearer(auth_dir / "app.token")
    good = jwks.read_bytes()
    caplog.set_level(logging.WARNING, "recserve_kit.admin")
    for broken in (good[: len(good) // 2], b"", b"[]", b'{"keys": []}'):
        jwks.write_bytes(broken)  # in place, as a careless writer would
        assert tokens.verify(token) == "app", broken
    jwks.unlink()
    assert tokens.verify(token) == "app"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 5 and all("keeping the 2 keys read before" in w for w in warnings)
    assert tokens.verify(token) == "app" and len(caplog.records) == 5  # once per version
    # A good file again: read, and a revocation in it takes effect.
    auth.rotate(auth_dir)
    auth.revoke(auth_dir, "recserve-admin-1")
    with pytest.raises(Unauthenticated):
        tokens.verify(token)


def test_a_verifier_needs_a_key_set_to_start(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        AdminTokens(tmp_path / "jwks.json")


def legacy_dir(auth_dir: Path) -> None:
    """A directory as `keys` made it before key generations: one private.pem,
    a JWKS of one key of kid recserve-admin-1, tokens signed with it."""
    auth_dir.mkdir(parents=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (auth_dir / "private.pem").write_bytes(pem)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(alg="RS256", use="sig", kid="recserve-admin-1")
    (auth_dir / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    now = int(time.time())
    for name, subject, audience in (("admin", "admin", AUDIENCE), ("app", "app", APP_AUDIENCE)):
        claims = {
            "iss": ISSUER,
            "aud": audience,
            "sub": subject,
            "iat": now,
            "exp": now + 86400 * 30,
        }
        token = jwt.encode(claims, pem, algorithm="RS256", headers={"kid": "recserve-admin-1"})
        (auth_dir / f"{name}.token").write_text(token)


def test_a_one_key_directory_is_migrated_in_place_and_its_tokens_stay_valid(tmp_path: Path):
    auth_dir = tmp_path / "auth"
    legacy_dir(auth_dir)
    app = AdminTokens(auth_dir / "jwks.json", APP_AUDIENCE)  # a service started before
    tokens = {name: (auth_dir / name).read_bytes() for name in ("admin.token", "app.token")}
    pem = (auth_dir / "private.pem").read_bytes()
    auth.ensure_keys(auth_dir)  # the runner's start, Compose's init, the Job
    assert not (auth_dir / "private.pem").exists()
    assert (auth_dir / "recserve-admin-1.pem").read_bytes() == pem
    assert {name: (auth_dir / name).read_bytes() for name in tokens} == tokens  # not minted again
    keys = auth.open_key_set(auth_dir)
    assert (keys.signing, keys.next) == ("recserve-admin-1", "recserve-admin-2")
    assert published(auth_dir) == ["recserve-admin-1", "recserve-admin-2"]
    assert app.verify(bearer(auth_dir / "app.token")) == "app"
    auth.rotate(auth_dir)
    assert app.verify(bearer(auth_dir / "app.token")) == "app"  # the next key, reread
    assert kid(auth_dir / "app.token") == "recserve-admin-2"


def test_a_command_on_a_directory_without_keys_says_how_to_make_them(tmp_path: Path):
    with pytest.raises(auth.KeySetError, match=r"keys .* makes one"):
        auth.rotate(tmp_path / "auth")


class FakeEnvoyAdmin(BaseHTTPRequestHandler):
    uptime_s = 0

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"state": "LIVE", "uptime_current_epoch": f"{self.uptime_s}s"}).encode()
        self.send_response(200 if self.path == "/server_info" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def envoy_admin() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeEnvoyAdmin)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_the_cli_rotates_revokes_and_lists(tmp_path: Path, envoy_admin: str):
    runner = CliRunner()
    legacy_dir(tmp_path / "auth")
    listed = runner.invoke(keys_app, ["list", "--data-dir", str(tmp_path)])
    assert listed.exit_code == 0 and "migrates it" in listed.output
    assert (tmp_path / "auth" / "private.pem").exists()  # list writes nothing
    made = runner.invoke(keys_app, [str(tmp_path / "auth")])  # the init steps' form: ensure
    assert made.exit_code == 0, made.output
    # An Envoy up for an hour read jwks.json before the next key was published.
    FakeEnvoyAdmin.uptime_s = 3600
    rotate = ["rotate", "--data-dir", str(tmp_path), "--envoy-admin", envoy_admin]
    refused = runner.invoke(keys_app, rotate)
    assert refused.exit_code == 1 and "Restart Envoy first" in refused.output
    assert kid(tmp_path / "auth" / "app.token") == "recserve-admin-1"  # nothing rotated
    FakeEnvoyAdmin.uptime_s = 0  # restarted just now
    keys = auth.open_key_set(tmp_path / "auth")
    keys.keys[keys.next].published -= 60  # published a minute before that
    keys.save()
    rotated = runner.invoke(keys_app, rotate)
    assert rotated.exit_code == 0, rotated.output
    assert "signing with recserve-admin-2" in rotated.output
    assert "it trusts the new tokens" in rotated.output
    assert "restart it before the next rotation" in rotated.output
    # The next rotation signs with a key published after this Envoy started.
    assert runner.invoke(keys_app, rotate).exit_code == 1
    assert runner.invoke(keys_app, [*rotate, "--force"]).exit_code == 0
    signing = runner.invoke(keys_app, ["revoke", "recserve-admin-3", "--data-dir", str(tmp_path)])
    assert signing.exit_code == 1 and "is the signing key" in signing.output
    revoked = runner.invoke(keys_app, ["revoke", "recserve-admin-1", "--data-dir", str(tmp_path)])
    assert revoked.exit_code == 0 and "revoked recserve-admin-1" in revoked.output
    listed = runner.invoke(keys_app, ["list", "--data-dir", str(tmp_path)])
    assert listed.exit_code == 0
    rows = {
        line.split()[1]: line for line in listed.output.splitlines() if "recserve-admin-" in line
    }
    assert "revoked" in rows["recserve-admin-1"] and "old" in rows["recserve-admin-2"]
    assert "signing" in rows["recserve-admin-3"] and "next" in rows["recserve-admin-4"]
    assert "recserve-admin-3 (signing)" in listed.output  # the token files' signer


def test_revoke_retired_drops_every_key_a_rotation_retired_and_then_nothing(auth_dir: Path):
    """What the scheduled revocation runs: no key id to know, the signing and
    next keys kept, a second run a no-op; a kid and --retired together, or
    neither, is a usage error that changes nothing."""
    runner = CliRunner()
    data_dir = ["--data-dir", str(auth_dir.parent)]
    app = AdminTokens(auth_dir / "jwks.json", APP_AUDIENCE, "app call")
    old = bearer(auth_dir / "app.token")
    auth.rotate(auth_dir)
    auth.rotate(auth_dir)  # recserve-admin-1 and -2 retired, -3 signs
    new = bearer(auth_dir / "app.token")
    for wrong in (["revoke", *data_dir], ["revoke", "recserve-admin-1", "--retired", *data_dir]):
        refused = runner.invoke(keys_app, wrong)
        assert refused.exit_code == 2 and "--retired" in refused.output
    assert auth.open_key_set(auth_dir).role("recserve-admin-1") == "old"
    revoked = runner.invoke(keys_app, ["revoke", "--retired", *data_dir])
    assert revoked.exit_code == 0, revoked.output
    assert "revoked recserve-admin-1, recserve-admin-2" in revoked.output
    keys = auth.open_key_set(auth_dir)
    roles = {k: keys.role(k) for k in keys.keys}
    assert roles == {
        "recserve-admin-1": "revoked",
        "recserve-admin-2": "revoked",
        "recserve-admin-3": "signing",
        "recserve-admin-4": "next",
    }
    assert published(auth_dir) == ["recserve-admin-3", "recserve-admin-4"]
    with pytest.raises(Unauthenticated, match="not in the key set"):
        app.verify(old)
    assert app.verify(new) == "app"
    again = runner.invoke(keys_app, ["revoke", "--retired", *data_dir])
    assert again.exit_code == 0 and "no retired key to revoke" in again.output
