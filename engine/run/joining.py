"""Joining a swarm that has a manifest (wire/manifest.py): which manifest this node follows, and its mix.

At start the runner connects once and reads the relay's manifest from its welcome (``join``). A node that could
not reach its relay then (or whose relay had no manifest) trains on its own mix; once it connects and the relay
announces a manifest, the node takes the same decision at its next round boundary (``pending``, ``follow``;
engine/run/node.py) and switches its mix there. In this order:
- a manifest the node cannot check (bounds, digest, caps) was already refused by the client: train alone;
- a pinned digest (``manifest_digest``, e.g. from an invite link) that differs: refused, train alone;
- a digest recorded in the data dir (``swarm-manifest.json``, the one this node joined with before) that
  differs: the change is reported (what changed) and the node keeps the recorded manifest;
- else the announced manifest is adopted and recorded.
A manifest this node's reasoning-gym cannot follow is refused too, in one line, and the node trains alone on
its own mix. Without a manifest nothing changes: the node's own settings, as before.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from engine.config import NodeConfig
from engine.errors import SapoError
from engine.run.event_log import EventLog
from engine.sharing.swarm_client import SwarmClient
from engine.tasks.swarm_mix import SwarmMix, swarm_mix
from wire import events as ev
from wire.manifest import Manifest, decode_manifest, manifest_bytes, manifest_digest, mix_summary

RECORD = "swarm-manifest.json"


def join(client: SwarmClient, cfg: NodeConfig, data_dir: Path, events: EventLog) -> tuple[NodeConfig, SwarmMix | None]:
    """The settings and mix this node runs with in ``client``'s swarm (the mix None: its own)."""
    client.ensure_connected()  # a refusal that retrying cannot fix is a SapoError here, as before
    return follow(client, cfg, data_dir, events)


def pending(client: SwarmClient) -> bool:
    """True if the relay has announced a manifest this node has not yet decided on (it started alone)."""
    return client.manifest is not None and client.joined is None and client.refused is None


def follow(client: SwarmClient, cfg: NodeConfig, data_dir: Path,
           events: EventLog) -> tuple[NodeConfig, SwarmMix | None]:
    """The decision on the manifest ``client`` holds (see the module's docstring): ``cfg`` and None unless adopted."""
    if client.refused is not None or client.manifest is None:
        return cfg, None  # refused: already said; no manifest: today's behaviour
    announced, digest = client.manifest, client.manifest_digest or manifest_digest(client.manifest)
    if cfg.manifest_digest is not None and digest != cfg.manifest_digest:
        client.refuse(f"relay {client.url} announces manifest {digest[:12]} for swarm {cfg.swarm}, "
                      f"but the invite pins {cfg.manifest_digest[:12]}")
        return cfg, None
    manifest = announced
    recorded = _recorded(data_dir, cfg.swarm, events)
    if recorded is not None and cfg.manifest_digest is None and manifest_digest(recorded) != digest:
        client.tell_change(recorded, announced, digest, events.emit)
        manifest, digest = recorded, manifest_digest(recorded)
    try:
        mix = swarm_mix(manifest, digest, cfg.task_config, cfg.task_levels)
    except SapoError as exc:
        client.refuse(str(exc))
        return cfg, None
    client.joined = manifest
    _record(data_dir, manifest)
    for note in mix.notes:
        events.status(f"swarm {cfg.swarm}: {note}")
    events.emit(ev.SwarmManifest(state="adopted", swarm=manifest.swarm, digest=digest, mix=mix_summary(manifest),
                                 completions=manifest.completions, max_tokens=manifest.max_tokens,
                                 format_bonus=manifest.format_bonus))
    cfg = dataclasses.replace(cfg, completions=manifest.completions, max_tokens=manifest.max_tokens,
                              format_bonus=manifest.format_bonus, tasks=[e.dataset for e in mix.mix],
                              task_weights={e.dataset: e.weight for e in mix.mix},
                              task_config={e.dataset: dict(e.config) for e in mix.mix},
                              task_levels=dict(mix.levels), manifest_digest=digest)
    return cfg, mix


def _recorded(data_dir: Path, swarm: str, events: EventLog) -> Manifest | None:
    """The manifest this node joined ``swarm`` with before, if it is recorded and intact (else None, said)."""
    path = data_dir / RECORD
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        events.status(f"{path} unreadable ({exc}): the relay's manifest is taken as new")
        return None
    if not isinstance(record, dict) or record.get("swarm") != swarm:
        return None  # another swarm's: joining this one is a first join
    try:
        return decode_manifest(record.get("manifest"), record.get("digest"))
    except (ValueError, TypeError) as exc:
        events.status(f"{path} does not hold up ({exc}): the relay's manifest is taken as new")
        return None


def _record(data_dir: Path, manifest: Manifest) -> None:
    """Atomically: the manifest this node follows in its swarm."""
    path = data_dir / RECORD
    tmp = path.with_suffix(".tmp")
    body = {"swarm": manifest.swarm, "digest": manifest_digest(manifest),
            "manifest": json.loads(manifest_bytes(manifest))}
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
