"""The operator's manifest key: ``sapo-relay keygen FILE`` makes one, ``sapo-relay --manifest-key FILE`` signs with it.

An Ed25519 private key in PKCS#8 PEM (``wire.identity.Identity``), kept by the operator like a TLS key. The relay
signs each declared swarm's manifest with it once at start (relay/swarms.py ``sign_swarms``); nodes know it by its
public key as 64 hex (``wire.manifest.signer_hex``): ``keygen`` prints it and ``sapo-relay invite --manifest-key``
puts it into the link. Replicas of one relay are given the same file, as they are given the same swarms file.

Replacing the key (a yearly rotation, or a key that may have leaked): ``sapo-relay handover OLD NEW FILE`` has
the old key sign the new key's public half (``wire.manifest.sign_handover``) and writes the chain to FILE (JSON;
``--after`` an earlier handover file extends that chain); ``sapo-relay --manifest-key NEW
--manifest-key-handover FILE`` serves it beside each manifest. Nodes that pinned or joined with an old key follow
the new one and refuse the old ones from then on (engine/run/joining.py).

Problems are one line (``ValueError``; ``sapo-relay`` exits 2 before it listens). A key file other users can read
is used with a warning, not refused as the engine refuses its node key: container secrets are often mounted so,
and the relay's host is the operator's own.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from pathlib import Path

from wire.identity import Identity
from wire.manifest import handover_chain, sign_handover, signer_hex
from wire.protocol import MAX_HANDOVERS, KeyHandover


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


def read_handovers(path: Path, signer: bytes) -> tuple[KeyHandover, ...]:
    """The handover chain in ``path`` (``handover_main`` writes it), checked to end at ``signer`` (the relay's
    --manifest-key); ValueError (one line) on anything else."""
    where = f"--manifest-key-handover {path}"
    try:
        data = json.loads(path.read_text())
        chain = tuple(KeyHandover(old=bytes.fromhex(h["old"]), signature=bytes.fromhex(h["signature"]))
                      for h in data["handovers"])
        to = bytes.fromhex(data["to"])
    except OSError as exc:
        raise ValueError(f"cannot read {where}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{where}: not a handover file ({type(exc).__name__}: {exc}); make one with: "
                         f"sapo-relay handover OLD NEW FILE") from None
    if to != signer:
        raise ValueError(f"{where} hands over to {signer_hex(to)[:12]}, not to the --manifest-key "
                         f"({signer_hex(signer)[:12]})")
    if not chain or any(len(h.old) != 32 or len(h.signature) != 64 for h in chain):
        raise ValueError(f"{where}: not a handover file (no handover, or keys of the wrong length)")
    handover_chain(list(chain), signer)  # each link signed by the key before it; ValueError names the broken one
    return chain


def handover_main(argv: list[str], prog: str) -> int:
    ap = argparse.ArgumentParser(
        prog=f"{prog} handover",
        description="Hand the manifest key over: OLD signs NEW's public key. Serve the result with "
                    "--manifest-key NEW --manifest-key-handover FILE; nodes that pin or joined with OLD follow NEW "
                    "and refuse OLD from then on.")
    ap.add_argument("old", type=Path, help="the manifest key in use until now (PEM)")
    ap.add_argument("new", type=Path, help="its successor (PEM; make one with: sapo-relay keygen FILE)")
    ap.add_argument("file", type=Path, help="where to write the handover; an existing file is never overwritten")
    ap.add_argument("--after", type=Path, metavar="FILE",
                    help="the handover file OLD was served with: the new chain keeps its links, so that nodes "
                         "still on an older key follow too")
    args = ap.parse_args(argv)
    try:
        old, _ = read_manifest_key(args.old)
        new, _ = read_manifest_key(args.new)
        if old.public_key == new.public_key:
            raise ValueError(f"{args.old} and {args.new} hold the same key")
        chain = read_handovers(args.after, old.public_key) if args.after is not None else ()
        chain = (*chain, sign_handover(old, new.public_key))
        if len(chain) > MAX_HANDOVERS:
            raise ValueError(f"a chain of {len(chain)} handovers: nodes take at most {MAX_HANDOVERS}; "
                             f"leave --after out (nodes still on the oldest keys then need a new invite)")
        handover_chain(list(chain), new.public_key)
        body = {"to": signer_hex(new.public_key),
                "handovers": [{"old": signer_hex(h.old), "signature": bytes(h.signature).hex()} for h in chain]}
        try:
            with open(args.file, "x") as fh:
                fh.write(json.dumps(body, indent=1) + "\n")
        except FileExistsError:
            raise ValueError(f"{args.file} exists: not overwritten") from None
        except OSError as exc:
            raise ValueError(f"cannot write {args.file}: {exc.strerror or exc}") from None
    except ValueError as exc:
        print(f"{prog} handover: {exc}", file=sys.stderr)
        return 2
    print(f"handover written to {args.file}: {signer_hex(old.public_key)[:12]} -> {signer_hex(new.public_key)[:12]}"
          f" ({len(chain)} in the chain); serve it with --manifest-key {args.new} --manifest-key-handover {args.file}")
    return 0
