"""Admin credentials for the ingress: a local RSA key set made at setup.

Envoy's jwt_authn filter checks admin calls against ``jwks.json``; the
runner writes one admin token (RS256, 30 days) to ``admin.token`` for
operators and tests, and one app token (audience recserve-app: the events
API, nothing else) to ``app.token`` for app backends. Nothing here is a
secret store: at scale, point Envoy at your identity provider's JWKS instead.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from recserve_kit.admin import APP_AUDIENCE, AUDIENCE, ISSUER

KEY_ID = "recserve-admin-1"


def _b64(number: int) -> str:
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def ensure_keys(auth_dir: Path) -> Path:
    """Creates the key pair, JWKS and admin token once; returns the JWKS path."""
    auth_dir.mkdir(parents=True, exist_ok=True)
    private_path = auth_dir / "private.pem"
    jwks_path = auth_dir / "jwks.json"
    if not private_path.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        private_path.chmod(0o600)
        numbers = key.public_key().public_numbers()
        jwks = {
            "keys": [
                {
                    "kty": "RSA",
                    "alg": "RS256",
                    "use": "sig",
                    "kid": KEY_ID,
                    "n": _b64(numbers.n),
                    "e": _b64(numbers.e),
                }
            ]
        }
        jwks_path.write_text(json.dumps(jwks))
    for name, subject, audience in (
        ("admin.token", "admin", AUDIENCE),
        ("app.token", "app", APP_AUDIENCE),
    ):
        token_path = auth_dir / name
        if not token_path.exists() or _expires_soon(token_path.read_text()):
            token_path.write_text(mint_token(private_path, subject, audience=audience))
            token_path.chmod(0o600)
    return jwks_path


def mint_token(
    private_path: Path, subject: str = "admin", ttl_s: int = 30 * 86400, audience: str = AUDIENCE
) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": audience, "sub": subject, "iat": now, "exp": now + ttl_s}
    return jwt.encode(claims, private_path.read_bytes(), algorithm="RS256", headers={"kid": KEY_ID})


def _expires_soon(token: str) -> bool:
    claims = jwt.decode(token, options={"verify_signature": False})
    return int(claims.get("exp", 0)) < time.time() + 86400
