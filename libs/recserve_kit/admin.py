"""Admin RPCs verify the caller's token inside the service, not only at Envoy.

Envoy's jwt_authn checks the token at the edge and forwards it; each service
checks it again against the same key set (defence in depth: a caller that
reaches an internal port, with a certificate of the stack, still needs the
admin token to change anything). RS256 against the JWKS made at setup.

The key set is read again whenever the file changes (a stat per call: its
inode, size and mtime), so a key that a rotation publishes is accepted and
a revoked one refused in every service at once, with no restart. A file
that is missing or does not parse keeps the last good key set (logged):
a bad write must not lock every caller out.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import jwt

from recserve_kit.errors import Unauthenticated

log = logging.getLogger(__name__)

ISSUER = "recserve-local"
AUDIENCE = "recserve-admin"
# App backends' credential (the events API): the same keys, its own audience,
# so an app token cannot make admin calls and an admin token is not an app's.
APP_AUDIENCE = "recserve-app"
ALGORITHMS = ["RS256"]


def _parse(raw: bytes) -> dict[str, jwt.PyJWK]:
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return {key.key_id: key for key in jwt.PyJWKSet.from_dict(data).keys if key.key_id}


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


class JwksFile:
    """The keys of a JWKS file by kid, read again when the file changes.
    The first read must succeed (a service does not start without keys)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen = _signature(path)
        self._keys = _parse(path.read_bytes())

    def keys(self) -> dict[str, jwt.PyJWK]:
        signature = _signature(self.path)
        if signature == self._seen:
            return self._keys
        self._seen = signature  # one warning per bad version, not one per call
        kept = f"keeping the {len(self._keys)} keys read before"
        if signature is None:
            log.warning("%s: cannot be read; %s", self.path, kept)
            return self._keys
        try:
            self._keys = _parse(self.path.read_bytes())
        except (OSError, ValueError, jwt.PyJWTError) as exc:
            log.warning("%s: not a usable key set (%s); %s", self.path, exc, kept)
        else:
            log.info("%s: read again, keys %s", self.path, ", ".join(sorted(self._keys)))
        return self._keys


class AdminTokens:
    """Verifies ``authorization: Bearer <jwt>`` metadata against a JWKS file,
    for one audience (``what`` names the kind of call in errors)."""

    def __init__(
        self, jwks_path: Path, audience: str | list[str] = AUDIENCE, what: str = "admin call"
    ) -> None:
        self.jwks = JwksFile(jwks_path)
        self.audience = audience
        self.what = what

    def verify(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> str:
        """The token's subject; Unauthenticated naming what is wrong otherwise."""
        header = next((v for k, v in metadata or () if k == "authorization"), None)
        if not isinstance(header, str) or not header.startswith("Bearer "):
            raise Unauthenticated(
                f"{self.what}: an `authorization: Bearer <token>` header is required"
            )
        token = header.removeprefix("Bearer ").strip()
        try:
            kid = jwt.get_unverified_header(token).get("kid")
            key = self.jwks.keys().get(kid) if kid else None
            if key is None:
                raise Unauthenticated(
                    f"{self.what}: the token's key is not in the key set (revoked or unknown)"
                )
            claims = jwt.decode(
                token, key.key, algorithms=ALGORITHMS, audience=self.audience, issuer=ISSUER,
                options={"require": ["exp", "iss", "aud"]},
            )  # fmt: skip
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"{self.what}: token refused ({exc})") from None
        return str(claims.get("sub", ""))
