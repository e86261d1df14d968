"""A throwaway private CA and a server certificate for 127.0.0.1 / localhost, made at test time.

Never committed: each test run makes its own keys (EC P-256: fast to make) in a temporary folder.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class PKI:
    ca: Path  # the CA certificate a node trusts (relay_ca_file)
    cert: Path  # the relay's certificate (--tls-cert)
    key: Path  # its key (--tls-key)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem_key(key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> bytes:
    crypt = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, crypt)


def server_cert(ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name, key: ec.EllipticCurvePrivateKey,
                *, days: float = 2, start_days_ago: float = 1) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name("sapo-relay test"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=start_days_ago))
        .not_valid_after(now - datetime.timedelta(days=start_days_ago) + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def make_pki(folder: Path) -> PKI:
    """A CA, and a server certificate it signed for localhost and 127.0.0.1 (valid from yesterday to tomorrow)."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("sapo test CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    pki = PKI(folder / "ca.pem", folder / "relay.pem", folder / "relay-key.pem")
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.cert.write_bytes(server_cert(ca_key, ca_name, key).public_bytes(serialization.Encoding.PEM))
    pki.key.write_bytes(_pem_key(key))
    # Spares for the tests of bad setups: another key, the key encrypted, an expired certificate.
    (folder / "other-key.pem").write_bytes(_pem_key(ec.generate_private_key(ec.SECP256R1())))
    (folder / "encrypted-key.pem").write_bytes(_pem_key(key, b"secret"))
    expired = server_cert(ca_key, ca_name, key, days=1, start_days_ago=3)
    (folder / "expired.pem").write_bytes(expired.public_bytes(serialization.Encoding.PEM))
    return pki
