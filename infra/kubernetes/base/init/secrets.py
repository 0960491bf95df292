"""The stack's certificates and keys as Kubernetes Secrets (the init Job).

    python secrets.py restore DIR   # the Secrets that exist -> DIR/tls, DIR/auth
    python secrets.py publish DIR   # DIR/tls, DIR/auth -> one Secret per consumer
    python secrets.py restart envoy # roll a Deployment's pods (after a key rotation)

Between the two the Job runs `python -m recserve_stack keys DIR/auth
--tls-dir DIR/tls`, as Compose's init does on its volume: restored first,
the CA, the admin key set and Triton's control secret stay what they were, and
only certificates that are due are renewed. The keys live in a memory
volume of the Job's pod and in Secrets, never on the shared data volume.

Each consumer's Secret holds only the files it reads (a component's
certificate and key, the CA, and Triton's control secret for Triton and the
ranker): a compromised pod holds no other component's key.

Envoy's TLS listener reads ``recserve-edge-tls`` (kubernetes.io/tls: tls.crt,
tls.key, ca.crt, cert-manager's keys). The Job writes a pair from the stack's
CA there unless another manager (cert-manager) owns that Secret: then it is
left to its owner, and `keys` leaves the restored copy as it is.

The nightly and the rotating CronJobs (keys.yaml) run the same steps; a
rotation then restarts Envoy, which reads the key set only at start, as
`kubectl rollout restart` does (the pod template's restartedAt annotation).

Standard library only: it runs in the pipelines image with the pod's
service account token (server-side apply, so a rerun is an update).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

COMPONENTS = ("gateway", "features", "retriever", "ranker", "triton", "envoy", "operator")
CONTROL = "triton-control.secret"
NEEDS_CONTROL = ("ranker", "triton")
EDGE_SECRET = "recserve-edge-tls"
SECRET_TYPES = {EDGE_SECRET: "kubernetes.io/tls"}
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# The admin Secret also holds every auth/*.pem: the signing and the next
# key, named by key id (private.pem before key generations), which change
# with each rotation.
ADMIN_SECRET = "recserve-admin"
PRIVATE_KEYS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\.pem")
FIELD_MANAGER = "recserve-init"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"  # the annotation kubectl's restart sets
LABELS = {"app.kubernetes.io/part-of": "recserve", "app.kubernetes.io/managed-by": FIELD_MANAGER}


def secrets() -> dict[str, dict[str, str]]:
    """Secret name -> {key: file under DIR}. Restored in this order, so the
    CA's own Secret, last, wins over the CA copies in the others."""
    out: dict[str, dict[str, str]] = {}
    for name in COMPONENTS:
        files = {"ca.pem": "tls/ca.pem", f"{name}.pem": f"tls/{name}.pem"}
        files[f"{name}.key"] = f"tls/{name}.key"
        if name in NEEDS_CONTROL:
            files[CONTROL] = f"tls/{CONTROL}"
        out[f"recserve-tls-{name}"] = files
    # The public key set: Envoy and every service verify admin tokens with it.
    out["recserve-jwks"] = {"jwks.json": "auth/jwks.json"}
    # The key set's state, a token for operators and one for app backends
    # (the events API), and (PRIVATE_KEYS) the private keys, one file per
    # key id; read by the Job alone.
    out[ADMIN_SECRET] = {
        "keys.json": "auth/keys.json",
        "jwks.json": "auth/jwks.json",
        "admin.token": "auth/admin.token",
        "app.token": "auth/app.token",
    }
    out["recserve-ca"] = {"ca.pem": "tls/ca.pem", "ca.key": "tls/ca.key", CONTROL: f"tls/{CONTROL}"}
    # Envoy's TLS listener, for app backends.
    out[EDGE_SECRET] = {key: f"edge/{key}" for key in ("tls.crt", "tls.key", "ca.crt")}
    return out


class Api:
    """The few calls this needs, over HTTPS with the service account's token."""

    def __init__(self, base: str, token: str, namespace: str, context: ssl.SSLContext | None):
        self.base = base.rstrip("/")
        self.token = token
        self.namespace = namespace
        self.context = context

    @classmethod
    def in_cluster(cls, account_dir: Path = SERVICE_ACCOUNT, base: str = "") -> Api:
        if not base:
            host = os.environ["KUBERNETES_SERVICE_HOST"]
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            base = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        token = (account_dir / "token").read_text().strip()
        namespace = (account_dir / "namespace").read_text().strip()
        context = None
        if base.startswith("https://"):
            context = ssl.create_default_context(cafile=str(account_dir / "ca.crt"))
        elif not base.startswith(("http://127.0.0.1:", "http://localhost:")):
            raise SystemExit(f"{base}: plain HTTP only to loopback (tests)")
        return cls(base, token, namespace, context)

    def secret_path(self, name: str) -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets/{name}"

    def call(
        self, method: str, path: str, body: bytes | None = None, kind: str = ""
    ) -> dict | None:
        request = urllib.request.Request(self.base + path, data=body, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if kind:
            request.add_header("Content-Type", kind)
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as reply:
                return json.loads(reply.read() or b"{}")
        except urllib.error.HTTPError as error:
            if error.code == 404 and method == "GET":
                return None
            detail = error.read().decode(errors="replace")[:500]
            raise SystemExit(f"{method} {path}: HTTP {error.code}: {detail}") from None

    def get_secret(self, name: str) -> dict[str, bytes] | None:
        found = self.call("GET", self.secret_path(name))
        if found is None:
            return None
        return {key: base64.b64decode(value) for key, value in found.get("data", {}).items()}

    def owned_by_another(self, name: str) -> bool:
        """The Secret exists and another manager made it (cert-manager's edge pair)."""
        found = self.call("GET", self.secret_path(name))
        labels = (found or {}).get("metadata", {}).get("labels") or {}
        return found is not None and labels.get("app.kubernetes.io/managed-by") != FIELD_MANAGER

    def apply_secret(self, name: str, data: dict[str, bytes]) -> None:
        manifest = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": self.namespace, "labels": LABELS},
            "type": SECRET_TYPES.get(name, "Opaque"),
            "data": {key: base64.b64encode(value).decode() for key, value in sorted(data.items())},
        }
        query = f"?fieldManager={FIELD_MANAGER}&force=true"
        body = json.dumps(manifest).encode()
        self.call("PATCH", self.secret_path(name) + query, body, "application/apply-patch+yaml")

    def restart(self, deployment: str) -> None:
        """Rolls ``deployment``'s pods, as `kubectl rollout restart` does."""
        path = f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{deployment}"
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        patch = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: now}}}}}
        body = json.dumps(patch).encode()
        self.call("PATCH", path, body, "application/strategic-merge-patch+json")


def _write_private(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    path.write_bytes(content)
    path.chmod(0o600)


def restore(api: Api, directory: Path) -> list[str]:
    """Writes every existing Secret's files under directory; returns their names."""
    found = []
    for name, files in secrets().items():
        data = api.get_secret(name)
        if data is None:
            continue
        for key, relative in files.items():
            if key in data:
                _write_private(directory / relative, data[key])
        if name == ADMIN_SECRET:
            for key in filter(PRIVATE_KEYS.fullmatch, data):
                _write_private(directory / "auth" / key, data[key])
        found.append(name)
    return found


def collect(directory: Path, skip: frozenset[str] = frozenset()) -> dict[str, dict[str, bytes]]:
    """Every Secret's data from the files, or SystemExit naming what is missing."""
    out: dict[str, dict[str, bytes]] = {}
    missing = []
    for name, files in secrets().items():
        if name in skip:
            continue
        data = {}
        for key, relative in files.items():
            path = directory / relative
            if path.is_file():
                data[key] = path.read_bytes()
            else:
                missing.append(str(path))
        if name == ADMIN_SECRET:
            for path in sorted((directory / "auth").glob("*.pem")):
                if PRIVATE_KEYS.fullmatch(path.name):
                    data[path.name] = path.read_bytes()
        out[name] = data
    if missing:
        raise SystemExit("missing (run recserve_stack keys first): " + ", ".join(sorted(missing)))
    return out


def publish(api: Api, directory: Path) -> list[str]:
    theirs = frozenset(n for n in SECRET_TYPES if api.owned_by_another(n))
    for name in sorted(theirs):
        print(f"{name}: another manager's (cert-manager?), left as it is")
    collected = collect(directory, theirs)
    for name, data in collected.items():
        api.apply_secret(name, data)
    return list(collected)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="secrets.py", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["restore", "publish", "restart"])
    parser.add_argument("target", help="the keys' directory; for restart, a Deployment")
    parser.add_argument("--api", default="", help="API server URL; default: in-cluster")
    parser.add_argument("--service-account-dir", type=Path, default=SERVICE_ACCOUNT)
    args = parser.parse_args(argv)
    api = Api.in_cluster(args.service_account_dir, args.api)
    try:
        if args.action == "restore":
            names = restore(api, Path(args.target))
            print(f"restored {len(names)} Secrets: {', '.join(names) or 'none (first run)'}")
        elif args.action == "restart":
            api.restart(args.target)
            print(f"deployment/{args.target}: restarting")
        else:
            names = publish(api, Path(args.target))
            print(f"applied {len(names)} Secrets: {', '.join(names)}")
    except (OSError, binascii.Error) as error:
        print(f"{args.action}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
