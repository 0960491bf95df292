"""Envoy's TLS listener for app backends: the edge pair from the stack's CA
(pki.ensure_edge), when the listener is on (settings), and the config that
serves it (envoy.render)."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from recserve_stack import envoy, pki
from recserve_stack.settings import EDGE_PORT, ROOT, StackSettings


def load(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_the_edge_pair_is_signed_by_the_stacks_ca_for_the_names_given(tmp_path):
    edge = pki.ensure_edge(tmp_path / "edge", tmp_path / "tls", ["localhost", "127.0.0.1", "shop"])
    cert, ca = load(edge / "tls.crt"), load(tmp_path / "tls" / "ca.pem")
    cert.verify_directly_issued_by(ca)
    assert (edge / "ca.crt").read_bytes() == (tmp_path / "tls" / "ca.pem").read_bytes()
    assert pki.certificate_names(cert) == ["localhost", "127.0.0.1", "shop"]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]  # a server, never a client
    assert (edge / "tls.key").stat().st_mode & 0o777 == 0o600
    key = serialization.load_pem_private_key((edge / "tls.key").read_bytes(), None)
    assert key.public_key() == cert.public_key()


def test_the_pair_is_kept_until_its_names_change(tmp_path):
    first = pki.ensure_edge(tmp_path / "edge", tmp_path / "tls", ["localhost"]) / "tls.crt"
    kept = first.read_bytes()
    pki.ensure_edge(tmp_path / "edge", tmp_path / "tls", ["localhost"])
    assert first.read_bytes() == kept
    pki.ensure_edge(tmp_path / "edge", tmp_path / "tls", ["localhost", "recs.example.com"])
    assert pki.certificate_names(load(first)) == ["localhost", "recs.example.com"]


def test_a_certificate_of_another_ca_is_left_as_it_is(tmp_path):
    """Yours, or cert-manager's: the stack never overwrites it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "recs.example.com")])
    now = dt.datetime.now(dt.UTC)
    theirs = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=2))  # due, were it ours
        .sign(key, hashes.SHA256())
    )
    edge = tmp_path / "edge"
    edge.mkdir()
    pem = theirs.public_bytes(serialization.Encoding.PEM)
    (edge / "tls.crt").write_bytes(pem)
    pki.ensure_edge(edge, tmp_path / "tls", ["localhost"])
    assert (edge / "tls.crt").read_bytes() == pem and not (edge / "tls.key").exists()


def test_the_listener_is_on_off_loopback_or_when_asked(tmp_path):
    assert StackSettings(data_dir=tmp_path).edge_listen_port == 0  # `make run`: plaintext only
    assert StackSettings(data_dir=tmp_path, host="10.0.0.5").edge_listen_port == EDGE_PORT
    assert StackSettings(data_dir=tmp_path, host="10.0.0.5", edge_port=0).edge_listen_port == 0
    asked = StackSettings(data_dir=tmp_path, edge_port=9443, edge_host="0.0.0.0")
    assert (asked.edge_listen_host, asked.edge_listen_port) == ("0.0.0.0", 9443)
    assert asked.edge_dir == tmp_path / "edge"
    names = StackSettings(data_dir=tmp_path, host="10.0.0.5", edge_names=["recs.example.com"])
    assert names.edge_certificate_names[:2] == ["localhost", "127.0.0.1"]
    assert {"10.0.0.5", "recs.example.com"} <= set(names.edge_certificate_names)
    assert "0.0.0.0" not in asked.edge_certificate_names  # no name a client dials


def listeners(settings: StackSettings) -> dict[str, dict]:
    config = yaml.safe_load(envoy.render(settings))  # resolves the shared filters' anchor
    return {item["name"]: item for item in config["static_resources"]["listeners"]}


def test_the_edge_listener_runs_the_public_listeners_filters_behind_tls(tmp_path):
    assert set(listeners(StackSettings(data_dir=tmp_path))) == {"public"}
    found = listeners(StackSettings(data_dir=tmp_path, edge_port=9443))
    public, edge = found["public"], found["edge"]
    assert edge["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 9443}
    (plain,), (tls,) = public["filter_chains"], edge["filter_chains"]
    assert tls["filters"] == plain["filters"] and "transport_socket" not in plain
    context = tls["transport_socket"]["typed_config"]
    assert context["@type"].endswith("tls.v3.DownstreamTlsContext")
    # The pair by file-based SDS: a file beside the config names it, and the
    # directory Envoy watches for the renames of a renewal.
    (secret,) = context["common_tls_context"]["tls_certificate_sds_secret_configs"]
    sds = tmp_path / "envoy" / "edge-sds.yaml"
    assert secret == {
        "name": "edge",
        "sds_config": {"resource_api_version": "V3", "path_config_source": {"path": str(sds)}},
    }
    assert "tls_certificates" not in context["common_tls_context"]
    assert sds_pair(envoy.edge_sds(tmp_path / "edge")) == {
        "certificate_chain": {"filename": f"{tmp_path}/edge/tls.crt"},
        "private_key": {"filename": f"{tmp_path}/edge/tls.key"},
        "watched_directory": {"path": f"{tmp_path}/edge"},
    }


def sds_pair(text: str) -> dict:
    """The one secret of an SDS file: Envoy's DiscoveryResponse, as YAML."""
    (secret,) = yaml.safe_load(text)["resources"]
    assert secret["@type"].endswith("tls.v3.Secret") and secret["name"] == "edge"
    return secret["tls_certificate"]


def test_the_compose_and_kubernetes_envoy_read_the_pair_by_the_committed_sds_file():
    """The image carries it beside its config; it names the pair at /data/edge
    (the volume in Compose, the Secret's mount on Kubernetes)."""
    text = envoy.COMPOSE_SDS_CONFIG.read_text()
    assert text == envoy.render_compose_sds(), "run: python -m recserve_stack render-envoy"
    assert sds_pair(text)["watched_directory"] == {"path": envoy.COMPOSE_EDGE_DIR}
    dockerfile = (ROOT / "infra" / "envoy" / "Dockerfile").read_text()
    assert f"COPY infra/compose/edge-sds.yaml {envoy.COMPOSE_SDS}\n" in dockerfile
    assert f"path_config_source: {{ path: {envoy.COMPOSE_SDS} }}" in envoy.render_compose()


def test_a_renewal_swaps_one_link_to_a_new_pair(tmp_path):
    """As a Kubernetes Secret volume: tls.crt and tls.key are links through
    ..data, and a renewal writes a new directory and renames ..data over the
    old link, so Envoy never reads a new key with the old certificate."""
    edge = pki.ensure_edge(tmp_path / "edge", tmp_path / "tls", ["localhost"])
    for name in ("tls.crt", "tls.key"):
        assert (edge / name).readlink() == Path("..data") / name
    first = (edge / "..data").readlink()
    pki.ensure_edge(edge, tmp_path / "tls", ["localhost", "recs.example.com"])
    second = (edge / "..data").readlink()
    assert second != first and (edge / second / "tls.crt").is_file()
    assert sorted(p.name for p in edge.iterdir()) == sorted(
        ["..data", str(second), "ca.crt", "tls.crt", "tls.key"]
    )  # the old pair removed, no temporary link left
    assert pki.certificate_names(load(edge / "tls.crt"))[-1] == "recs.example.com"


def test_a_pair_of_plain_files_becomes_links_at_its_renewal(tmp_path):
    """A directory from before the links, or a copy that followed them
    (cp -rL, a backup): renewed in place all the same."""
    made = pki.ensure_edge(tmp_path / "made", tmp_path / "tls", ["localhost"])
    edge = tmp_path / "edge"
    shutil.copytree(made, edge)  # follows links: ..data a directory, the pair files
    assert not (edge / "..data").is_symlink() and not (edge / "tls.crt").is_symlink()
    pki.ensure_edge(edge, tmp_path / "tls", ["recs.example.com"])
    assert (edge / "..data").is_symlink()
    assert (edge / "tls.key").is_symlink() and (edge / "tls.crt").is_symlink()
    key = serialization.load_pem_private_key((edge / "tls.key").read_bytes(), None)
    assert key.public_key() == load(edge / "tls.crt").public_key()


def test_your_own_pair_is_used_as_it_is_and_must_be_there(tmp_path):
    own = tmp_path / "own"
    settings = StackSettings(data_dir=tmp_path / "data", edge_port=9443, edge_tls_dir=own)
    with pytest.raises(FileNotFoundError, match=r"tls\.crt or tls\.key"):
        envoy.write_config(settings)
    pki.ensure_edge(own, tmp_path / "their-ca", ["recs.example.com"])
    before = (own / "tls.crt").read_bytes()
    envoy.write_config(settings)
    # The SDS file is written beside Envoy's config, never into your directory.
    sds = (tmp_path / "data" / "envoy" / "edge-sds.yaml").read_text()
    assert sds_pair(sds)["certificate_chain"] == {"filename": f"{own}/tls.crt"}
    assert sds_pair(sds)["watched_directory"] == {"path": str(own)}
    assert (own / "tls.crt").read_bytes() == before
    assert not (tmp_path / "data" / "edge").exists()
