"""The init Job's Secrets (infra/kubernetes/base/init/secrets.py) against a
stand-in API server on loopback: publish applies one Secret per consumer
with only its files, a rerun restores the CA so `recserve_stack keys`
renews nothing, and every Secret the manifests mount is one it writes; the
keys CronJobs run the same steps, a rotation then restarting Envoy."""

from __future__ import annotations

import base64
import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from recserve_kit.errors import Unauthenticated
from recserve_stack import auth, pki
from tests.kubernetes.manifests import K8S, OVERLAYS, containers, objects, of_kind, pod, pods

SCRIPT = K8S / "base" / "init" / "secrets.py"


def load():
    spec = importlib.util.spec_from_file_location("init_secrets", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeApi(BaseHTTPRequestHandler):
    store: dict[str, dict] = {}
    seen: list[tuple[str, str, str, str]] = []

    def log_message(self, *args):  # quiet
        pass

    def reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def name(self) -> str:
        return self.path.split("?")[0].rsplit("/", 1)[1]

    def do_GET(self):
        self.seen.append(("GET", self.path, self.headers["Authorization"], ""))
        found = self.store.get(self.name())
        self.reply(200, found) if found else self.reply(404, {"reason": "NotFound"})

    def do_PATCH(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append(
            ("PATCH", self.path, self.headers["Authorization"], self.headers["Content-Type"])
        )
        self.store[self.name()] = json.loads(body)
        self.reply(200, self.store[self.name()])


@pytest.fixture()
def api(tmp_path):
    FakeApi.store, FakeApi.seen = {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("the-token\n")
    (account / "namespace").write_text("recserve\n")
    yield [f"--api=http://127.0.0.1:{server.server_port}", f"--service-account-dir={account}"]
    server.shutdown()


def keys(directory: Path) -> None:
    auth.ensure_keys(directory / "auth")
    pki.ensure_edge(directory / "edge", directory / "tls", ["envoy"])


def test_publish_writes_each_consumer_only_its_files(api, tmp_path):
    script = load()
    keys(tmp_path / "keys")
    assert script.main(["publish", str(tmp_path / "keys"), *api]) == 0
    store = FakeApi.store
    assert set(store) == set(script.secrets())
    # One look at the edge Secret's owner, then only applies.
    assert FakeApi.seen[0][:2] == ("GET", "/api/v1/namespaces/recserve/secrets/recserve-edge-tls")
    for method, path, token, kind in FakeApi.seen[1:]:
        assert method == "PATCH" and token == "Bearer the-token"
        assert kind == "application/apply-patch+yaml" and "fieldManager=recserve-init" in path
        assert path.startswith("/api/v1/namespaces/recserve/secrets/")
    for name in ("gateway", "features", "retriever", "envoy"):
        assert set(store[f"recserve-tls-{name}"]["data"]) == {
            "ca.pem",
            f"{name}.pem",
            f"{name}.key",
        }
    for name in ("ranker", "triton"):  # and the control secret Triton and the ranker share
        data = store[f"recserve-tls-{name}"]["data"]
        assert set(data) == {"ca.pem", f"{name}.pem", f"{name}.key", "triton-control.secret"}
    gateway = store["recserve-tls-gateway"]["data"]
    assert (
        base64.b64decode(gateway["gateway.key"]) == (tmp_path / "keys/tls/gateway.key").read_bytes()
    )
    assert set(store["recserve-jwks"]["data"]) == {"jwks.json"}
    assert "ca.key" in store["recserve-ca"]["data"]
    # The key set: its state, the signing and the next private key, the tokens.
    assert set(store["recserve-admin"]["data"]) == {
        "keys.json",
        "jwks.json",
        "admin.token",
        "app.token",
        "recserve-admin-1.pem",
        "recserve-admin-2.pem",
    }


def test_a_rerun_keeps_the_ca_and_the_control_secret(api, tmp_path):
    script = load()
    keys(tmp_path / "first")
    assert script.main(["publish", str(tmp_path / "first"), *api]) == 0
    # The next run's pod starts with an empty memory volume.
    assert script.main(["restore", str(tmp_path / "second"), *api]) == 0
    keys(tmp_path / "second")
    for path in (
        "tls/ca.pem",
        "tls/ca.key",
        "tls/triton-control.secret",
        "tls/ranker.pem",
        "auth/keys.json",
        "auth/recserve-admin-1.pem",
        "auth/recserve-admin-2.pem",
        "auth/app.token",
    ):
        assert (tmp_path / "second" / path).read_bytes() == (
            tmp_path / "first" / path
        ).read_bytes(), path
    assert ((tmp_path / "second" / "tls" / "ca.key").stat().st_mode & 0o777) == 0o600


def test_a_rotated_key_set_goes_through_the_secret_without_the_old_private_key(api, tmp_path):
    script = load()
    keys(tmp_path / "first")
    auth.rotate(tmp_path / "first" / "auth")
    assert script.main(["publish", str(tmp_path / "first"), *api]) == 0
    admin = FakeApi.store["recserve-admin"]["data"]
    assert {"recserve-admin-2.pem", "recserve-admin-3.pem"} <= set(admin)
    assert "recserve-admin-1.pem" not in admin  # it only verifies now
    assert script.main(["restore", str(tmp_path / "second"), *api]) == 0
    keys(tmp_path / "second")  # the init Job's rerun: nothing to renew, nothing rotated back
    for path in ("auth/keys.json", "auth/jwks.json", "auth/app.token", "auth/recserve-admin-3.pem"):
        assert (tmp_path / "second" / path).read_bytes() == (
            tmp_path / "first" / path
        ).read_bytes(), path


def test_a_secret_of_one_key_is_migrated_and_published_without_it(api, tmp_path):
    """An admin Secret made before key generations (private.pem, kid
    recserve-admin-1): restored, migrated by `keys`, published anew."""
    script = load()
    keys(tmp_path / "first")
    assert script.main(["publish", str(tmp_path / "first"), *api]) == 0
    auth_dir = tmp_path / "first" / "auth"
    legacy_jwks = json.loads((auth_dir / "jwks.json").read_text())["keys"][:1]
    assert legacy_jwks[0]["kid"] == "recserve-admin-1"
    legacy = {
        "private.pem": (auth_dir / "recserve-admin-1.pem").read_bytes(),
        "jwks.json": json.dumps({"keys": legacy_jwks}).encode(),
        "admin.token": (auth_dir / "admin.token").read_bytes(),
        "app.token": (auth_dir / "app.token").read_bytes(),
    }
    FakeApi.store["recserve-admin"]["data"] = {
        key: base64.b64encode(value).decode() for key, value in legacy.items()
    }
    assert script.main(["restore", str(tmp_path / "second"), *api]) == 0
    keys(tmp_path / "second")
    assert script.main(["publish", str(tmp_path / "second"), *api]) == 0
    admin = FakeApi.store["recserve-admin"]["data"]
    assert "private.pem" not in admin and "recserve-admin-1.pem" in admin
    assert base64.b64decode(admin["recserve-admin-1.pem"]) == legacy["private.pem"]
    # The tokens stay (still valid, signed by the same key), not minted again.
    assert base64.b64decode(admin["app.token"]) == legacy["app.token"]


def test_the_first_run_restores_nothing_and_publish_needs_every_file(api, tmp_path, capsys):
    script = load()
    assert script.main(["restore", str(tmp_path / "empty"), *api]) == 0
    assert "none (first run)" in capsys.readouterr().out
    auth.ensure_keys(tmp_path / "partial" / "auth")  # no certificates
    with pytest.raises(SystemExit, match=r"missing.*gateway\.pem"):
        script.main(["publish", str(tmp_path / "partial"), *api])
    assert FakeApi.store == {}


def test_plain_http_only_to_loopback(tmp_path):
    script = load()
    (tmp_path / "token").write_text("t")
    (tmp_path / "namespace").write_text("recserve")
    with pytest.raises(SystemExit, match="loopback"):
        script.Api.in_cluster(tmp_path, "http://10.0.0.1:443")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_mounted_secret_is_one_the_job_writes_with_those_keys(overlay):
    written = load().secrets()
    docs = objects(overlay)
    for p in pods(docs):
        for volume in p.spec.get("volumes", []):
            if "secret" not in volume:
                continue
            name = volume["secret"]["secretName"]
            assert name in written, (p.owner, name)
            for item in volume["secret"].get("items", []):
                assert item["key"] in written[name], (p.owner, name, item["key"])
    (role,) = [
        r for r in of_kind(docs, "Role").values() if r["metadata"]["name"] == "recserve-init"
    ]
    (named,) = [r for r in role["rules"] if "resourceNames" in r and r["resources"] == ["secrets"]]
    assert set(named["resourceNames"]) == set(written) and set(named["verbs"]) == {"get", "patch"}
    # What Triton's start script and Envoy's config read is in their Secrets.
    assert {"triton.pem", "triton.key", "ca.pem", "triton-control.secret"} == set(
        written["recserve-tls-triton"]
    )
    assert {"envoy.pem", "envoy.key", "ca.pem"} == set(written["recserve-tls-envoy"])
    assert {"tls.crt", "tls.key", "ca.crt"} == set(written["recserve-edge-tls"])


def test_the_edge_pair_is_a_tls_secret_unless_cert_manager_owns_it(api, tmp_path):
    script = load()
    keys(tmp_path / "keys")
    assert script.main(["publish", str(tmp_path / "keys"), *api]) == 0
    edge = FakeApi.store["recserve-edge-tls"]
    assert edge["type"] == "kubernetes.io/tls"
    pem = (tmp_path / "keys/edge/tls.crt").read_bytes()
    assert base64.b64decode(edge["data"]["tls.crt"]) == pem
    # cert-manager's own Secret (no ca.crt from a public CA): restored for
    # `keys`, which leaves a pair it did not issue alone, and never applied.
    theirs = {"tls.crt": b"their chain", "tls.key": b"their key"}
    FakeApi.store["recserve-edge-tls"] = {
        "metadata": {"labels": {"app.kubernetes.io/managed-by": "cert-manager"}},
        "type": "kubernetes.io/tls",
        "data": {key: base64.b64encode(value).decode() for key, value in theirs.items()},
    }
    assert script.main(["restore", str(tmp_path / "rerun"), *api]) == 0
    assert (tmp_path / "rerun/edge/tls.crt").read_bytes() == b"their chain"
    FakeApi.seen.clear()
    assert script.main(["publish", str(tmp_path / "keys"), *api]) == 0
    patched = {path.split("?")[0].rsplit("/", 1)[1] for m, path, *_ in FakeApi.seen if m == "PATCH"}
    assert "recserve-edge-tls" not in patched and "recserve-tls-envoy" in patched
    assert (
        FakeApi.store["recserve-edge-tls"]["data"]["tls.crt"]
        == base64.b64encode(b"their chain").decode()
    )


def test_the_job_runs_restore_keys_build_publish_in_that_order():
    docs = objects("cpu")
    (job,) = [p for p in pods(docs) if p.app == "recserve-init"]
    steps = [" ".join(c["command"]) for c in containers(job.spec)]
    assert steps == [
        "python /opt/recserve/init/secrets.py restore /keys",
        "python -m recserve_stack keys /keys/auth --tls-dir /keys/tls --edge-dir /keys/edge"
        " --edge-name envoy --edge-name envoy.recserve.svc"
        " --edge-name envoy.recserve.svc.cluster.local",
        "python -m pipelines build --data-dir /data",
        "python -m pipelines publish --data-dir /data --redis-url redis://redis:6379/0",
        "python -m services.retriever index --data-dir /data --qdrant-url http://qdrant:6333",
        "python /opt/recserve/init/secrets.py publish /keys",
    ]
    volumes = {v["name"]: v for v in job.spec["volumes"]}
    assert volumes["keys"]["emptyDir"]["medium"] == "Memory"  # keys never on disk
    for c in containers(job.spec):
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        assert ("/data" in mounts) == (c["name"] in ("build", "publish-features", "index")), c[
            "name"
        ]
        assert ("/keys" in mounts) == (c["name"] in ("restore-keys", "keys", "publish-secrets"))
    script = volumes["scripts"]["configMap"]["name"]
    assert of_kind(docs, "ConfigMap")[script]["data"]["secrets.py"] == SCRIPT.read_text()


def steps(spec: dict) -> list[str]:
    return [" ".join(c["command"]) for c in containers(spec)]


def test_the_keys_cronjobs_run_the_init_jobs_key_steps_and_rotations_restart_envoy():
    docs = objects("cpu")
    init = steps(pod(docs, "recserve-init").spec)
    restore, ensure, publish = init[0], init[1], init[-1]
    nightly, rotation = pod(docs, "recserve-keys"), pod(docs, "recserve-keys-rotate")
    revocation = pod(docs, "recserve-keys-revoke")
    assert steps(nightly.spec) == [restore, ensure, publish]  # tokens renewed when due
    restart = "python /opt/recserve/init/secrets.py restart envoy"
    rotate = "python -m recserve_stack keys rotate --data-dir /keys"
    assert steps(rotation.spec) == [restore, rotate, publish, restart]
    revoke = "python -m recserve_stack keys revoke --retired --data-dir /keys"
    assert steps(revocation.spec) == [restore, revoke, publish, restart]
    crons = of_kind(docs, "CronJob")
    for operators in ("recserve-keys-rotate", "recserve-keys-revoke"):
        assert crons[operators]["spec"]["suspend"] is True  # an operator runs it
    assert not crons["recserve-keys"]["spec"].get("suspend")
    for job in (nightly, rotation, revocation):
        volumes = {v["name"]: v for v in job.spec["volumes"]}
        assert volumes["keys"]["emptyDir"]["medium"] == "Memory" and "data" not in volumes
        assert job.spec["serviceAccountName"] == "recserve-init"
    rules = of_kind(docs, "Role")["recserve-init"]["rules"]
    restart = {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["patch"]}
    assert [{**restart, "resourceNames": ["envoy"]}] == [
        r for r in rules if r["resources"] == ["deployments"]
    ]
    assert "envoy" in of_kind(docs, "Deployment")


def test_a_rotation_then_a_revocation_as_the_cronjobs_run_them(api, tmp_path):
    """Restore into an empty volume, `keys rotate`, publish, restart Envoy,
    against the stand-in API server: new tokens in the Secret, the old ones
    still valid with the published key set, Envoy's pods rolled; then the
    revocation's steps, after which only the new tokens verify."""
    from typer.testing import CliRunner

    from recserve_kit.admin import APP_AUDIENCE, AUDIENCE, AdminTokens
    from recserve_stack.keys_cli import app

    script = load()
    keys(tmp_path / "init")
    assert script.main(["publish", str(tmp_path / "init"), *api]) == 0
    volume = tmp_path / "rotation"  # the CronJob pod's memory volume
    assert script.main(["restore", str(volume), *api]) == 0
    rotated = CliRunner().invoke(app, ["rotate", "--data-dir", str(volume)])
    assert rotated.exit_code == 0, rotated.output
    assert script.main(["publish", str(volume), *api]) == 0
    assert script.main(["restart", "envoy", *api]) == 0
    admin = {k: base64.b64decode(v) for k, v in FakeApi.store["recserve-admin"]["data"].items()}
    jwks = tmp_path / "published-jwks.json"
    jwks.write_bytes(base64.b64decode(FakeApi.store["recserve-jwks"]["data"]["jwks.json"]))
    for name, audience in (("admin.token", AUDIENCE), ("app.token", APP_AUDIENCE)):
        old = (tmp_path / "init" / "auth" / name).read_text().strip()
        new = admin[name].decode().strip()
        assert new != old
        for token in (old, new):  # no downtime: both verify until `keys revoke`
            AdminTokens(jwks, audience).verify([("authorization", f"Bearer {token}")])
    method, path, _, kind = FakeApi.seen[-1]
    assert (method, path) == ("PATCH", "/apis/apps/v1/namespaces/recserve/deployments/envoy")
    assert kind == "application/strategic-merge-patch+json"
    template = FakeApi.store["envoy"]["spec"]["template"]["metadata"]
    assert template["annotations"]["kubectl.kubernetes.io/restartedAt"].endswith("Z")
    # The revocation CronJob, once the new tokens are handed out: restore,
    # `keys revoke --retired`, publish, restart; the old tokens are refused.
    volume = tmp_path / "revocation"
    assert script.main(["restore", str(volume), *api]) == 0
    revoked = CliRunner().invoke(app, ["revoke", "--retired", "--data-dir", str(volume)])
    assert revoked.exit_code == 0 and "revoked recserve-admin-1" in revoked.output
    assert script.main(["publish", str(volume), *api]) == 0
    jwks.write_bytes(base64.b64decode(FakeApi.store["recserve-jwks"]["data"]["jwks.json"]))
    for name, audience in (("admin.token", AUDIENCE), ("app.token", APP_AUDIENCE)):
        old = (tmp_path / "init" / "auth" / name).read_text().strip()
        with pytest.raises(Unauthenticated, match="not in the key set"):
            AdminTokens(jwks, audience).verify([("authorization", f"Bearer {old}")])
        AdminTokens(jwks, audience).verify([("authorization", f"Bearer {admin[name].decode()}")])
