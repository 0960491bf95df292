"""Admin and app credentials for the ingress: a local RSA key set, in generations.

Envoy's jwt_authn filter and every service check tokens against
``jwks.json``; ``admin.token`` (operators, tests) and ``app.token`` (audience
recserve-app: the events API, nothing else) are minted with the *signing*
key and last 30 days. The set also holds a *next* key, published in
``jwks.json`` before it signs anything (as OIDC providers publish theirs):
Envoy reads the file only at start, so an Envoy started since the last
rotation already trusts the key the next rotation signs with.

``rotate`` makes the next key the signing one, mints both tokens with it
and publishes a new next key; the keys before stay published, so tokens
already handed out keep working until ``revoke`` drops their key. The
services reread ``jwks.json`` when it changes (recserve_kit.admin): a
revocation takes effect there at once, with no restart.

The auth directory holds ``<kid>.pem`` for the signing and the next key
(0600; an older key only verifies, so its private half is deleted),
``keys.json`` (which kid signs, which is next, when each was published or
revoked, the public keys), ``jwks.json`` (the public keys not revoked,
derived from keys.json) and the two tokens. Every file is written to a
temporary name and renamed, so a reader never sees half of one. Nothing
here is a secret store: at scale, point Envoy at your identity provider's
JWKS instead.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from recserve_kit.admin import APP_AUDIENCE, AUDIENCE, ISSUER

KID_PREFIX = "recserve-admin-"
LEGACY_KID = KID_PREFIX + "1"  # the one key of a directory made before generations
LEGACY_KEY = "private.pem"
STATE = "keys.json"
JWKS = "jwks.json"
TOKEN_TTL_S = 30 * 86400
RENEW_WITHIN_S = 86400
# File name -> (subject, audience) of the tokens minted with the signing key.
TOKENS = {"admin.token": ("admin", AUDIENCE), "app.token": ("app", APP_AUDIENCE)}


class KeySetError(Exception):
    """A key set operation that cannot be done; the message says why and what to do."""


@dataclass
class KeyRecord:
    published: float  # when its public key first went into jwks.json
    jwk: dict[str, str] = field(default_factory=dict)  # empty once revoked
    revoked: float | None = None


@dataclass
class KeySet:
    auth_dir: Path
    signing: str
    next: str
    keys: dict[str, KeyRecord]

    @classmethod
    def read(cls, auth_dir: Path) -> KeySet:
        data = json.loads((auth_dir / STATE).read_text())
        keys = {kid: KeyRecord(**record) for kid, record in data["keys"].items()}
        return cls(auth_dir, data["signing"], data["next"], keys)

    def save(self) -> None:
        data = {
            "signing": self.signing,
            "next": self.next,
            "keys": {kid: asdict(record) for kid, record in self.keys.items()},
        }
        write_atomic(self.auth_dir / STATE, json.dumps(data, indent=2).encode(), 0o600)

    def private_path(self, kid: str) -> Path:
        return self.auth_dir / f"{kid}.pem"

    def role(self, kid: str) -> str:
        if self.keys[kid].revoked is not None:
            return "revoked"
        return {self.signing: "signing", self.next: "next"}.get(kid, "old")

    def published_jwks(self) -> dict[str, list[dict[str, str]]]:
        live = [record.jwk for record in self.keys.values() if record.revoked is None]
        return {"keys": live}

    def publish(self) -> bool:
        """Writes jwks.json if it differs from the key set; True if it did."""
        path = self.auth_dir / JWKS
        text = json.dumps(self.published_jwks()).encode()
        if path.exists() and path.read_bytes() == text:
            return False
        write_atomic(path, text, 0o644)  # public, and read by Envoy
        return True

    def new_kid(self) -> str:
        """The next generation's kid; revoked kids count, so none is reused."""
        numbers = [int(kid.removeprefix(KID_PREFIX)) for kid in self.keys if _generation(kid)]
        return f"{KID_PREFIX}{max(numbers, default=0) + 1}"

    def add_key(self, now: float) -> str:
        kid = self.new_kid()
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        write_atomic(self.private_path(kid), _pem(key), 0o600)
        self.keys[kid] = KeyRecord(published=now, jwk=_public_jwk(key, kid))
        return kid


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """A temporary file beside ``path``, synced, then renamed over it."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _generation(kid: str) -> bool:
    return kid.startswith(KID_PREFIX) and kid.removeprefix(KID_PREFIX).isdigit()


def _b64(number: int) -> str:
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _public_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, str]:
    numbers = key.public_key().public_numbers()
    return {
        "kty": "RSA",
        "alg": "RS256",
        "use": "sig",
        "kid": kid,
        "n": _b64(numbers.n),
        "e": _b64(numbers.e),
    }


def open_key_set(auth_dir: Path, create: bool = False) -> KeySet:
    """The key set of ``auth_dir``; a directory of one ``private.pem`` (kid
    recserve-admin-1) is migrated in place, its tokens stay valid."""
    if (auth_dir / STATE).exists():
        return KeySet.read(auth_dir)
    if (auth_dir / LEGACY_KEY).exists():
        return _migrate(auth_dir)
    if not create:
        raise KeySetError(f"no key set in {auth_dir}: `recserve-stack keys {auth_dir}` makes one")
    auth_dir.mkdir(parents=True, exist_ok=True)
    keys = KeySet(auth_dir, "", "", {})
    now = time.time()
    keys.signing = keys.add_key(now)
    keys.next = keys.add_key(now)
    keys.save()
    return keys


def _migrate(auth_dir: Path) -> KeySet:
    legacy = auth_dir / LEGACY_KEY
    key = serialization.load_pem_private_key(legacy.read_bytes(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise KeySetError(f"{legacy}: not an RSA key")
    jwks = auth_dir / JWKS
    # Published when jwks.json was written: an Envoy started since knows it.
    published = jwks.stat().st_mtime if jwks.exists() else time.time()
    keys = KeySet(auth_dir, LEGACY_KID, "", {})
    keys.keys[LEGACY_KID] = KeyRecord(published=published, jwk=_public_jwk(key, LEGACY_KID))
    write_atomic(keys.private_path(LEGACY_KID), _pem(key), 0o600)
    keys.next = keys.add_key(time.time())
    keys.save()
    keys.publish()
    legacy.unlink()
    return keys


def ensure_keys(auth_dir: Path) -> Path:
    """Creates the key set and both tokens once (migrating a one-key
    directory); mints a token again when it has less than a day left or
    its key is no longer published. Returns the JWKS path."""
    keys = open_key_set(auth_dir, create=True)
    keys.publish()
    for name in TOKENS:
        path = auth_dir / name
        if not path.exists() or _due(path.read_text(), keys):
            write_token(keys, name)
    return auth_dir / JWKS


def write_token(keys: KeySet, name: str) -> None:
    subject, audience = TOKENS[name]
    token = _mint(keys, subject, TOKEN_TTL_S, audience)
    write_atomic(keys.auth_dir / name, token.encode(), 0o600)


def _mint(keys: KeySet, subject: str, ttl_s: int, audience: str) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": audience, "sub": subject, "iat": now, "exp": now + ttl_s}
    path = keys.private_path(keys.signing)
    if not path.exists():
        raise KeySetError(f"{path}: the signing key's private half is missing")
    private = path.read_bytes()
    return jwt.encode(claims, private, algorithm="RS256", headers={"kid": keys.signing})


def mint_token(
    auth_dir: Path, subject: str = "admin", ttl_s: int = TOKEN_TTL_S, audience: str = AUDIENCE
) -> str:
    """A token signed with the key set's signing key (tests, tools)."""
    return _mint(open_key_set(auth_dir), subject, ttl_s, audience)


@dataclass
class TokenInfo:
    name: str
    kid: str
    expires: float


def token_info(path: Path) -> TokenInfo:
    """Who signed a token file and when it expires (read, not verified)."""
    token = path.read_text().strip()
    kid = str(jwt.get_unverified_header(token).get("kid", ""))
    claims = jwt.decode(token, options={"verify_signature": False})
    return TokenInfo(path.name, kid, float(claims.get("exp", 0)))


def _due(token: str, keys: KeySet) -> bool:
    kid = jwt.get_unverified_header(token).get("kid")
    record = keys.keys.get(str(kid))
    if record is None or record.revoked is not None:
        return True
    claims = jwt.decode(token, options={"verify_signature": False})
    return int(claims.get("exp", 0)) < time.time() + RENEW_WITHIN_S


@dataclass
class Rotation:
    retired: str  # signed until now; stays published until revoked
    signing: str  # the former next key
    next: str  # published now
    next_published: float


def rotate(auth_dir: Path) -> Rotation:
    """The next key signs from now on: both tokens are minted again with it,
    a new next key is published, the former signing key stays published."""
    keys = open_key_set(auth_dir)
    retired, signing = keys.signing, keys.next
    now = time.time()
    keys.next = keys.add_key(now)
    keys.signing = signing
    keys.save()  # the commit point: a crash before it leaves the set as it was
    keys.publish()
    for name in TOKENS:
        write_token(keys, name)
    # Its tokens are verified with the public key alone; it signs nothing again.
    keys.private_path(retired).unlink(missing_ok=True)
    return Rotation(retired, signing, keys.next, now)


def revoke(auth_dir: Path, kid: str) -> KeySet:
    """Drops ``kid`` from jwks.json: its tokens are refused from then on.
    Revoking the next key publishes a new one in its place."""
    keys = open_key_set(auth_dir)
    record = keys.keys.get(kid)
    if record is None:
        raise KeySetError(f"no key {kid!r} in {auth_dir}; the keys: {', '.join(keys.keys)}")
    if record.revoked is not None:
        raise KeySetError(f"{kid} is already revoked")
    if kid == keys.signing:
        raise KeySetError(
            f"{kid} is the signing key (admin.token and app.token are signed with it, and "
            "no other key signs): run `keys rotate` first, hand out the new tokens, then "
            "revoke it"
        )
    now = time.time()
    record.revoked, record.jwk = now, {}
    if kid == keys.next:
        keys.next = keys.add_key(now)
    keys.save()
    keys.publish()
    keys.private_path(kid).unlink(missing_ok=True)
    return keys


def revoke_retired(auth_dir: Path) -> list[str]:
    """Revokes every key a rotation retired (neither signing nor next, not
    revoked yet): what a rotation's grace ends with, named by role, so that a
    scheduled job needs no key id. Returns the kids revoked (none: a no-op)."""
    keys = open_key_set(auth_dir)
    retired = [kid for kid in keys.keys if keys.role(kid) == "old"]
    for kid in retired:
        revoke(auth_dir, kid)
    return retired
