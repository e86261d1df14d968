"""The operator's manifest key: ``sapo-relay keygen FILE`` makes one, ``sapo-relay --manifest-key FILE`` signs with it.

An Ed25519 private key in PKCS#8 PEM (``wire.identity.Identity``), kept by the operator like a TLS key. The relay
signs each declared swarm's manifest with it once at start (relay/swarms.py ``sign_swarms``); nodes know it by its
public key as 64 hex (``wire.manifest.signer_hex``): ``keygen`` prints it and ``sapo-relay invite --manifest-key``
puts it into the link. Replicas of one relay are given the same file, as they are given the same swarms file.

Problems are one line (``ValueError``; ``sapo-relay`` exits 2 before it listens). A key file other users can read
is used with a warning, not refused as the engine refuses its node key: container secrets are often mounted so,
and the relay's host is the operator's own.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

from wire.identity import Identity
from wire.manifest import signer_hex


def read_manifest_key(path: Path) -> tuple[Identity, list[str]]:
    """The key in ``path``, and notes to log (a file others can read); ValueError (one line) on anything else."""
    try:
        pem = path.read_bytes()
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError as exc:
        raise ValueError(f"cannot read --manifest-key {path}: {exc.strerror or exc}") from None
    try:
        identity = Identity.from_pem(pem)
    except ValueError as exc:
        raise ValueError(f"--manifest-key {path}: {exc} (make one with: sapo-relay keygen FILE)") from None
    notes = []
    if os.name == "posix" and mode & 0o077:
        notes.append(f"--manifest-key {path} is readable by other users (mode {mode:04o}): whoever reads it can "
                     f"sign this relay's manifests; chmod 600 it")
    return identity, notes


def write_new_key(path: Path) -> Identity:
    """A new key in ``path``, mode 0600 from the first byte; never over an existing file (ValueError, one line)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ValueError(f"{path} exists: not overwritten (nodes that pin its key would refuse a new one)") from None
    except OSError as exc:
        raise ValueError(f"cannot create {path}: {exc.strerror or exc}") from None
    identity = Identity.generate()
    try:
        with os.fdopen(fd, "wb") as f:
            if os.name == "posix":
                os.fchmod(f.fileno(), 0o600)  # O_CREAT's mode is only ever narrowed by the umask: be explicit
            f.write(identity.to_pem())
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise ValueError(f"cannot write {path}: {exc.strerror or exc}") from None
    return identity


def keygen_main(argv: list[str], prog: str) -> int:
    ap = argparse.ArgumentParser(prog=f"{prog} keygen",
                                 description="Make a manifest key (Ed25519, PEM, mode 0600) for --manifest-key.")
    ap.add_argument("file", type=Path, help="where to write it; an existing file is never overwritten")
    args = ap.parse_args(argv)
    try:
        identity = write_new_key(args.file)
    except ValueError as exc:
        print(f"{prog} keygen: {exc}", file=sys.stderr)
        return 2
    print(f"manifest key written to {args.file}; keep it as you keep a TLS key, and give every replica the same file")
    print(f"signer {signer_hex(identity.public_key)}")
    return 0
