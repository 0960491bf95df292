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
# App backends' credential (the events API): the same keys, its own audience,
# so an app token cannot make admin calls and an admin token is not an app's.
APP_AUDIENCE = "recserve-app"
ALGORITHMS = ["RS256"]


class AdminTokens:
    """Verifies ``authorization: Bearer <jwt>`` metadata against a JWKS file,
    for one audience (``what`` names the kind of call in errors)."""

    def __init__(
        self, jwks_path: Path, audience: str | list[str] = AUDIENCE, what: str = "admin call"
    ) -> None:
        keys = jwt.PyJWKSet.from_dict(json.loads(jwks_path.read_text()))
        self.keys = {key.key_id: key for key in keys.keys}
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
            key = self.keys.get(kid) if kid else None
            if key is None:
                raise Unauthenticated(f"{self.what}: the token's key is not in the key set")
            claims = jwt.decode(
                token, key.key, algorithms=ALGORITHMS, audience=self.audience, issuer=ISSUER,
                options={"require": ["exp", "iss", "aud"]},
            )  # fmt: skip
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"{self.what}: token refused ({exc})") from None
        return str(claims.get("sub", ""))
