"""TLS for the relay: ``--tls-cert`` / ``--tls-key`` turn ws:// into wss:// (and http into https).

The stdlib ``ssl`` module serves; ``cryptography`` reads the files first only to say plainly
what is wrong with them (a missing file, not PEM, an encrypted key, a key of another
certificate, an expired certificate), since OpenSSL's own messages ("[SSL] PEM lib") do not.
"""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization


class TLSSetupError(ValueError):
    """A certificate or key the relay cannot serve with; the message is one line for the user."""


def _read(path: Path, flag: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TLSSetupError(f"cannot read {flag} {path}: {exc.strerror or exc}") from None


def check_pair(cert_file: Path, key_file: Path, now: datetime.datetime | None = None) -> x509.Certificate:
    """The server certificate (first of the chain) once it and the key are known to belong together."""
    cert_pem, key_pem = _read(cert_file, "--tls-cert"), _read(key_file, "--tls-key")
    try:
        chain = x509.load_pem_x509_certificates(cert_pem)
    except ValueError:
        raise TLSSetupError(f"--tls-cert {cert_file} is not a PEM certificate (-----BEGIN CERTIFICATE-----)") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:  # cryptography says "Password was not given but private key is encrypted"
        raise TLSSetupError(f"--tls-key {key_file} is encrypted: give the relay an unencrypted key") from None
    except (ValueError, UnsupportedAlgorithm):
        raise TLSSetupError(f"--tls-key {key_file} is not a PEM private key") from None
    cert = chain[0]
    raw = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if cert.public_key().public_bytes(*raw) != key.public_key().public_bytes(*raw):
        raise TLSSetupError(f"--tls-key {key_file} does not belong to the certificate in --tls-cert {cert_file}")
    now = now or datetime.datetime.now(datetime.UTC)
    if cert.not_valid_after_utc < now:
        raise TLSSetupError(f"the certificate in --tls-cert {cert_file} expired on {cert.not_valid_after_utc:%Y-%m-%d}")
    if cert.not_valid_before_utc > now:
        raise TLSSetupError(f"the certificate in --tls-cert {cert_file} is not valid before "
                            f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")
    return cert


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """An SSLContext serving ``cert_file`` (the certificate, then any intermediates) with ``key_file``."""
    check_pair(cert_file, key_file)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (ssl.SSLError, OSError) as exc:  # checked above; OpenSSL may still refuse (an unsupported key type)
        raise TLSSetupError(f"cannot serve --tls-cert {cert_file} with --tls-key {key_file}: {exc}") from None
    return context
