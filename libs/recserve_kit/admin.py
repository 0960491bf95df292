"""Admin RPCs verify the caller's token inside the service, not only at Envoy.

Envoy's jwt_authn checks the token at the edge and forwards it; each service
checks it again against the same key set (defence in depth: a caller that
reaches an internal port, with a certificate of the stack, still needs the
admin token to change anything). RS256 against the JWKS made at setup.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import jwt

from recserve_kit.errors import Unauthenticated

ISSUER = "recserve-local"
AUDIENCE = "recserve-admin"
ALGORITHMS = ["RS256"]


class AdminTokens:
    """Verifies ``authorization: Bearer <jwt>`` metadata against a JWKS file."""

    def __init__(self, jwks_path: Path) -> None:
        keys = jwt.PyJWKSet.from_dict(json.loads(jwks_path.read_text()))
        self.keys = {key.key_id: key for key in keys.keys}

    def verify(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> str:
        """The token's subject; Unauthenticated naming what is wrong otherwise."""
        header = next((v for k, v in metadata or () if k == "authorization"), None)
        if not isinstance(header, str) or not header.startswith("Bearer "):
            raise Unauthenticated(
                "admin call: an `authorization: Bearer <token>` header is required"
            )
        token = header.removeprefix("Bearer ").strip()
        try:
            kid = jwt.get_unverified_header(token).get("kid")
            key = self.keys.get(kid) if kid else None
            if key is None:
                raise Unauthenticated("admin call: the token's key is not in the admin key set")
            claims = jwt.decode(
                token, key.key, algorithms=ALGORITHMS, audience=AUDIENCE, issuer=ISSUER,
                options={"require": ["exp", "iss", "aud"]},
            )  # fmt: skip
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"admin call: token refused ({exc})") from None
        return str(claims.get("sub", ""))
