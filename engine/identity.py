"""A node's persistent identity: a random id kept in the data dir, and a friendly name from it."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from engine.errors import SapoError


def load_or_create_node_id(data_dir: Path) -> str:
    path = data_dir / "node.json"
    if path.exists():
        try:
            node_id = json.loads(path.read_text())["node_id"]
        except (ValueError, KeyError, TypeError, OSError):
            raise SapoError(f"node identity file {path} is corrupt; delete it to start as a new node") from None
        if not (isinstance(node_id, str) and len(node_id) == 32 and all(c in "0123456789abcdef" for c in node_id)):
            raise SapoError(f"node identity file {path} holds an invalid id; delete it to start as a new node")
        return node_id
    node_id = secrets.token_hex(16)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"node_id": node_id}) + "\n")
    os.replace(tmp, path)
    return node_id
