"""The stack's own certificate authority, made at setup like the admin key set.

Every component gets a certificate from a local CA (``ca.pem``): the services,
Triton and Envoy present theirs as servers and as clients, so each internal
port accepts only callers holding a certificate of this CA (mutual TLS);
``operator`` is the one for people, tests and benches; ``triton-control.secret``
is the header value Triton wants for model control (the ranker's alone). Keys are ECDSA P-256:
the handshake is cheap, and connections are long-lived anyway. Nothing here
is a secret store: at scale, issue these from your own PKI (cert-manager,
Vault, SPIFFE) into the same files.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
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
) -> x509.Certificate:
    # The Compose service name, and loopback for the local stack.
    alt_names = [
        x509.DNSName(name),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    return (
        _builder(subject, ca_cert.subject, key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
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
