"""The stack's own certificate authority, made at setup like the admin key set.

Every component gets a certificate from a local CA (``ca.pem``): the services,
Triton and Envoy present theirs as servers and as clients, so each internal
port accepts only callers holding a certificate of this CA (mutual TLS);
``operator`` is the one for people, tests and benches; ``triton-control.secret``
is the header value Triton wants for model control (the ranker's alone). Keys are ECDSA P-256:
the handshake is cheap, and connections are long-lived anyway. Nothing here
is a secret store: at scale, issue these from your own PKI (cert-manager,
Vault, SPIFFE) into the same files.

The edge pair (``ensure_edge``) is the certificate of Envoy's TLS listener
for app backends, in cert-manager's file names (``tls.crt``, ``tls.key``,
``ca.crt``), so a Secret cert-manager writes can take its place. It is laid
out as a Kubernetes Secret volume is: ``tls.crt`` and ``tls.key`` are links
through ``..data`` to a directory holding the pair, and a renewal writes a new
directory and renames one link, so Envoy (watching the directory for renames)
reloads a new key and its certificate together, never one without the other.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
import shutil
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from recserve_kit.transport import TRITON_CONTROL_SECRET

IDENTITIES = ("gateway", "features", "retriever", "ranker", "triton", "envoy", "operator")
VALID_DAYS = 365
RENEW_DAYS = 30
EDGE_CERT, EDGE_KEY, EDGE_CA = "tls.crt", "tls.key", "ca.crt"
EDGE_DATA = "..data"  # the link a renewal swaps, a Kubernetes Secret volume's name
EDGE_VERSION = "..pair-"  # the directories it points to, one kept
EDGE_SUBJECT = "recserve edge"


def ensure_pki(tls_dir: Path, identities: tuple[str, ...] = IDENTITIES) -> Path:
    """Creates the CA and one certificate per identity once, renewing any that
    expire within 30 days or were not signed by the current CA; returns the dir."""
    tls_dir.mkdir(parents=True, exist_ok=True)
    tls_dir.chmod(0o700)
    ca_key, ca_cert = _ensure_ca(tls_dir)
    for name in identities:
        cert_path = tls_dir / f"{name}.pem"
        if cert_path.exists() and _current(
            x509.load_pem_x509_certificate(cert_path.read_bytes()), ca_cert
        ):
            continue
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _leaf(name, key, ca_key, ca_cert)
        _write_key(tls_dir / f"{name}.key", key)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    control = tls_dir / TRITON_CONTROL_SECRET
    if not control.exists():
        control.write_text(secrets.token_hex(32))
        control.chmod(0o600)
    return tls_dir


def ensure_edge(edge_dir: Path, tls_dir: Path, names: list[str]) -> Path:
    """The TLS listener's pair from the stack's CA, naming ``names``: made
    once, renewed when due or when the names change. A certificate another
    CA issued (your own, cert-manager's) is left as it is."""
    ca_key, ca_cert = _ensure_ca(ensure_pki(tls_dir))
    cert_path = edge_dir / EDGE_CERT
    if cert_path.exists():
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if cert.issuer != ca_cert.subject:
            return edge_dir
        if _current(cert, ca_cert) and certificate_names(cert) == list(names):
            return edge_dir
    edge_dir.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    # Server auth only: the edge certificate is no client of anything.
    cert = _leaf(EDGE_SUBJECT, key, ca_key, ca_cert, names, [ExtendedKeyUsageOID.SERVER_AUTH])
    (edge_dir / EDGE_CA).write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _swap_edge_pair(edge_dir, key, cert)
    return edge_dir


def _swap_edge_pair(
    edge_dir: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate
) -> None:
    """The pair in a new directory, then one rename of ``..data`` to serve it;
    the names become links through ``..data`` (a rename each, the first time)."""
    version = Path(tempfile.mkdtemp(prefix=EDGE_VERSION, dir=edge_dir))
    _write_key(version / EDGE_KEY, key)
    (version / EDGE_CERT).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _replace_link(edge_dir / EDGE_DATA, version.name)
    for name in (EDGE_CERT, EDGE_KEY):
        _replace_link(edge_dir / name, f"{EDGE_DATA}/{name}")
    for old in edge_dir.iterdir():
        if old.name.startswith(EDGE_VERSION) and old != version:
            shutil.rmtree(old)


def _replace_link(path: Path, target: str) -> None:
    """``path`` a symbolic link to ``target``, put there by one rename."""
    if path.is_symlink() and os.readlink(path) == target:
        return
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)  # a copy that followed the link (cp -rL, a backup)
    temporary = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")
    temporary.symlink_to(target)
    os.replace(temporary, path)


def certificate_names(cert: x509.Certificate) -> list[str]:
    """The DNS names and IP addresses a certificate is good for, in its order."""
    try:
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(name.value) for name in alt if isinstance(name, (x509.DNSName, x509.IPAddress))]


def _alt_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _ensure_ca(tls_dir: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key_path, cert_path = tls_dir / "ca.key", tls_dir / "ca.pem"
    if key_path.exists() and cert_path.exists():
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if isinstance(key, ec.EllipticCurvePrivateKey) and _current(cert, cert):
            return key, cert
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "recserve local CA")])
    cert = (
        _builder(name, name, key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert


def _leaf(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    names: list[str] | None = None,
    usages: list[x509.ObjectIdentifier] | None = None,
) -> x509.Certificate:
    # By default the Compose service name, and loopback for the local stack.
    alt_names = [_alt_name(n) for n in names or [name, "localhost", "127.0.0.1"]]
    usages = usages or [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    return (
        _builder(subject, ca_cert.subject, key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = _now()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
    )


def _current(cert: x509.Certificate, ca_cert: x509.Certificate) -> bool:
    """Signed by this CA and valid for at least another RENEW_DAYS."""
    if cert.issuer != ca_cert.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return cert.not_valid_after_utc > _now() + dt.timedelta(days=RENEW_DAYS)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
