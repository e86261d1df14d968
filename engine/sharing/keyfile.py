"""A node's persistent identity: its Ed25519 key in the data dir (mode 0600), and the id it implies.

``node.key`` (PKCS#8 PEM) is the identity; ``node.json`` only records the id and public key
for people and tools. Ids, names and signing rules are in ``wire.identity``.

Data dirs from before signed identities hold a random id in ``node.json`` and no key. Such an id
cannot be proven, so the node makes a key and takes the id that key implies (a new id; the old
one's stats on a relay stay with the old id). ``load_or_create`` says so in its note.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from engine.errors import SapoError
from wire.identity import Identity, is_node_id

KEY_FILE = "node.key"
INFO_FILE = "node.json"


@dataclass(frozen=True)
class Loaded:
    identity: Identity
    note: str | None  # something the user should hear about (a new key, a changed id)


def load_or_create(data_dir: Path) -> Loaded:
    """The node's identity from ``data_dir``, made on first use. SapoError with one clear line on trouble."""
    key_path = data_dir / KEY_FILE
    if key_path.exists():
        identity = _load_key(key_path)
        note = None
    else:
        old_id = _old_node_id(data_dir / INFO_FILE)
        identity = Identity.generate()
        _write_private(key_path, identity.to_pem())
        if old_id and old_id != identity.node_id:
            note = (f"this node now signs with a key ({key_path}); its node id changed from {old_id} to "
                    f"{identity.node_id}, because ids are now derived from keys")
        else:
            note = f"new node identity {identity.node_id} (key in {key_path})"
    _write_info(data_dir / INFO_FILE, identity)
    return Loaded(identity, note)


def install(data_dir: Path, identity: Identity) -> None:
    """Give a data dir this identity (simulations and benchmarks that want the same node ids every run)."""
    _write_private(data_dir / KEY_FILE, identity.to_pem())
    _write_info(data_dir / INFO_FILE, identity)


def _load_key(path: Path) -> Identity:
    if os.name == "posix":
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            # Refused, not fixed: others may have read it already. The owner decides.
            raise SapoError(f"node key {path} is readable by other users (mode {mode:04o}); "
                            f"run `chmod 600 {path}`, or delete it to start as a new node")
    try:
        return Identity.from_pem(path.read_bytes())
    except (ValueError, OSError) as exc:
        raise SapoError(f"node key {path} is unreadable or corrupt ({exc}); "
                        f"delete it to start as a new node") from None


def _old_node_id(path: Path) -> str | None:
    try:
        node_id = json.loads(path.read_text())["node_id"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return node_id if is_node_id(node_id) else None


def _write_private(path: Path, data: bytes) -> None:
    """Written to a 0600 file from the first byte (no window where it is readable), then renamed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if os.name == "posix":
            os.chmod(tmp, 0o600)  # O_CREAT's mode is masked by umask only downwards; be explicit
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_info(path: Path, identity: Identity) -> None:
    info = {"node_id": identity.node_id, "public_key": identity.public_key.hex()}
    try:
        if json.loads(path.read_text()) == info:
            return
    except (OSError, ValueError):
        pass
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info) + "\n")
    os.replace(tmp, path)
