"""``sapo-relay invite SWARM --swarms FILE --url URL``: print the swarm's invite link (wire/invite.py), both forms.

The link carries the relay URL(s) given, the swarm's name, its token if it is private, the manifest's digest
(from the same ``--swarms`` file the relay runs with), with ``--tls-cert`` of a self-signed relay the sha256 of that
certificate, which the node then trusts instead of a CA, and with ``--manifest-key`` (the relay's) the key's public
half, so that the node follows only manifests that key signed. Problems are one line and exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import ssl
import sys
from pathlib import Path

from relay.manifest_key import read_manifest_key
from relay.swarms import load_swarms
from wire.addresses import split_relay_urls
from wire.invite import Invite, format_invite, format_invite_https
from wire.manifest import signer_hex


def build_parser(prog: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=f"{prog} invite", description="Print a swarm's invite link.")
    ap.add_argument("swarm", help="a swarm of the --swarms file")
    ap.add_argument("--swarms", type=Path, required=True, metavar="FILE.toml", help="the relay's swarms file")
    ap.add_argument("--url", required=True, help="the relay's address as nodes reach it, wss://host:port "
                                                 "(replicas comma-separated)")
    ap.add_argument("--token", help="the relay's --token, if it has one and the swarm has none of its own")
    ap.add_argument("--tls-cert", type=Path, metavar="FILE",
                    help="a self-signed relay's certificate (PEM): its sha256 goes into the link")
    ap.add_argument("--manifest-key", type=Path, metavar="FILE",
                    help="the relay's --manifest-key: the link pins its signer (the public half only goes in)")
    ap.add_argument("--page", help="base of the https form (default: the first relay's host, https://HOST:PORT)")
    return ap


def certificate_sha256(path: Path) -> str:
    """sha256 of the DER encoding of a PEM certificate (its first one): what the node compares."""
    try:
        pem = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read --tls-cert {path}: {getattr(exc, 'strerror', None) or exc}") from None
    start = pem.find("-----BEGIN CERTIFICATE-----")
    end = pem.find("-----END CERTIFICATE-----", start)
    if start < 0 or end < 0:
        raise ValueError(f"--tls-cert {path} holds no PEM certificate")
    try:
        der = ssl.PEM_cert_to_DER_cert(pem[start:end + len("-----END CERTIFICATE-----")])
    except ValueError as exc:
        raise ValueError(f"--tls-cert {path}: {exc}") from None
    return hashlib.sha256(der).hexdigest()


def invite_main(argv: list[str], prog: str) -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        swarms, _ = load_swarms(args.swarms, args.token)
        entry = swarms.get(args.swarm)
        if entry is None:
            raise ValueError(f"swarm {args.swarm!r} is not in {args.swarms} (it has: {', '.join(sorted(swarms))})")
        token = entry.token or (args.token if not entry.manifest.public else None)
        signer = signer_hex(read_manifest_key(args.manifest_key)[0].public_key) if args.manifest_key else None
        invite = Invite(relays=split_relay_urls(args.url), swarm=args.swarm, token=token,
                        ca_sha256=certificate_sha256(args.tls_cert) if args.tls_cert else None,
                        manifest_digest=entry.digest, manifest_signer=signer)
    except ValueError as exc:
        print(f"{prog} invite: {exc}", file=sys.stderr)
        return 2
    print(format_invite(invite))
    print(format_invite_https(invite, args.page))
    return 0
