"""The TLS listener serves a renewed certificate without a restart: the real
Envoy, on the config the local stack renders (file-based SDS), with its pair
replaced on disk the way each deployment does it; a new handshake shows the
new serial while the same Envoy process runs on.

No gateway runs: the TLS handshake is all these tests need of the listener."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from cryptography import x509

from recserve_stack import envoy, pki
from recserve_stack.settings import StackSettings
from tests.helpers import free_ports, poll_until


@dataclass
class Edge:
    process: subprocess.Popen[bytes]
    port: int
    admin_port: int

    def serial(self, ca: Path) -> int:
        """The serial of the certificate a new TLS handshake shows."""
        context = ssl.create_default_context(cafile=str(ca))
        with (
            socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number

    def wait_for_serial(self, ca: Path, serial: int) -> None:
        poll_until(lambda: self.serial(ca) == serial, 30, 0.1, f"serial {serial} at the edge")
        assert self.process.poll() is None  # the same Envoy, never restarted

    def counter(self, name: str) -> int:
        url = f"http://127.0.0.1:{self.admin_port}/stats?filter={quote(f'^{name}$')}"
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
        return int(text.split(": ", 1)[1]) if ": " in text else 0


@contextmanager
def running_edge(tmp_path: Path, **edge: object) -> Iterator[Edge]:
    listen, admin, gateway, port = free_ports(4)
    settings = StackSettings(
        data_dir=tmp_path / "data",
        envoy_port=listen,
        envoy_admin_port=admin,
        gateway_port=gateway,
        edge_port=port,
        **edge,
    )
    command = [envoy.envoy_binary(), "-c", str(envoy.write_config(settings))]
    with (tmp_path / "envoy.log").open("wb") as log:
        process = subprocess.Popen(
            [*command, "--disable-hot-restart", "--log-level", "warn"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    found = Edge(process, port, admin)
    try:
        poll_until(lambda: ready(admin), 30, 0.1, "Envoy ready")
        yield found
    finally:
        process.terminate()
        process.wait(10)


def ready(admin_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/ready", timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


# The reloads that failed: a new key read with the old certificate, say.
FAILED_RELOADS = "sds.edge.key_rotation_failed"


def test_a_renewed_generated_pair_is_served_without_a_restart(tmp_path):
    """The stack's own pair: ensure_edge renews it (here because the names
    change) by one swap of ..data, which Envoy reads whole the first time."""
    with running_edge(tmp_path) as edge:
        data = tmp_path / "data"
        edge_dir = data / "edge"
        ca = edge_dir / pki.EDGE_CA
        first = edge.serial(ca)
        assert first == serial_of(edge_dir / pki.EDGE_CERT)
        pid = edge.process.pid
        pki.ensure_edge(edge_dir, data / "tls", ["localhost", "recs.example.com"])
        renewed = serial_of(edge_dir / pki.EDGE_CERT)
        assert renewed != first
        edge.wait_for_serial(ca, renewed)
        assert edge.process.pid == pid
        assert edge.counter(FAILED_RELOADS) == 0  # never a key without its certificate


class SecretVolume:
    """A directory laid out as the kubelet writes a Secret volume: the keys
    are links through ..data to a timestamped directory, and an update writes
    a new directory, then renames a new ..data link over the old one."""

    def __init__(self, path: Path):
        self.path = path
        self.versions = 0
        path.mkdir()

    def write(self, pair: Path) -> None:
        self.versions += 1
        version = self.path / f"..2026_01_01_00_00_0{self.versions}.000000001"
        version.mkdir()
        for name in (pki.EDGE_CERT, pki.EDGE_KEY):
            shutil.copyfile(pair / name, version / name)
        old = (self.path / "..data").resolve() if (self.path / "..data").exists() else None
        (self.path / "..data_tmp").symlink_to(version.name)
        os.replace(self.path / "..data_tmp", self.path / "..data")
        for name in (pki.EDGE_CERT, pki.EDGE_KEY):
            if not (self.path / name).is_symlink():
                (self.path / name).symlink_to(f"..data/{name}")
        if old is not None:
            shutil.rmtree(old)


def test_a_kubernetes_secret_update_is_served_without_a_restart(tmp_path):
    """cert-manager's renewal: the kubelet swaps the mounted Secret's ..data link."""
    their_ca = tmp_path / "their-ca"
    first_pair = pki.ensure_edge(tmp_path / "first", their_ca, ["localhost"])
    volume = SecretVolume(tmp_path / "mounted")
    volume.write(first_pair)
    with running_edge(tmp_path, edge_tls_dir=volume.path) as edge:
        ca = their_ca / "ca.pem"
        assert edge.serial(ca) == serial_of(first_pair / pki.EDGE_CERT)
        pid = edge.process.pid
        second_pair = pki.ensure_edge(tmp_path / "second", their_ca, ["localhost"])
        volume.write(second_pair)
        edge.wait_for_serial(ca, serial_of(second_pair / pki.EDGE_CERT))
        assert edge.process.pid == pid
        assert edge.counter(FAILED_RELOADS) == 0


@pytest.mark.parametrize("first", [pki.EDGE_KEY, pki.EDGE_CERT])
def test_your_own_pair_renamed_into_place_is_served_without_a_restart(tmp_path, first):
    """Your own directory (RECSERVE_STACK_EDGE_TLS_DIR, a Compose mount): write
    the new files beside the old, rename each into place. Between the two
    renames Envoy may read a key and a certificate that do not match; it
    keeps the old pair then, and takes the new one at the second rename."""
    their_ca, own = tmp_path / "their-ca", tmp_path / "own"
    own.mkdir()
    for name in (pki.EDGE_CERT, pki.EDGE_KEY):
        shutil.copyfile(
            pki.ensure_edge(tmp_path / "first", their_ca, ["localhost"]) / name, own / name
        )
    with running_edge(tmp_path, edge_tls_dir=own) as edge:
        ca = their_ca / "ca.pem"
        old = edge.serial(ca)
        assert old == serial_of(own / pki.EDGE_CERT)
        pid = edge.process.pid
        new_pair = pki.ensure_edge(tmp_path / "second", their_ca, ["localhost"])
        for name in (pki.EDGE_CERT, pki.EDGE_KEY):
            shutil.copyfile(new_pair / name, own / f".{name}.new")
        second = pki.EDGE_CERT if first == pki.EDGE_KEY else pki.EDGE_KEY
        os.replace(own / f".{first}.new", own / first)
        os.replace(own / f".{second}.new", own / second)
        edge.wait_for_serial(ca, serial_of(new_pair / pki.EDGE_CERT))
        assert edge.process.pid == pid
