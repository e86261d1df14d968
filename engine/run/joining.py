"""Joining a swarm that has a manifest (wire/manifest.py): which manifest this node follows, and its mix.

At start the runner connects once and reads the relay's manifest from its welcome (``join``). A node that could
not reach its relay then (or whose relay had no manifest) trains on its own mix; once it connects and the relay
announces a manifest, the node takes the same decision at its next round boundary (``pending``, ``follow``;
engine/run/node.py) and switches its mix there. In this order:
- a manifest the node cannot check (bounds, digest, caps, a signature its signer did not make) was already
  refused by the client: train alone;
- a pinned digest (``manifest_digest``, e.g. from an invite link) that differs: refused, train alone;
- a pinned signer (``manifest_signer``: the operator's manifest key, wire/manifest.py) that did not sign it (an
  unsigned manifest included): refused, train alone;
- a manifest recorded in the data dir (``swarm-manifest.json``, the one this node joined with before, its signer
  beside its digest) that the announced one differs from (another digest; or, joined signed, signed by another key
  or unsigned now), unless the invite pins the digest or another signer: the change is reported (what changed)
  and the node keeps the recorded manifest;
- else the announced manifest is adopted and recorded, with its signer.
A signer pin lets a node take rules from a relay it cannot otherwise tell from its operator (a replica, a host run
for the operator): whoever does not hold the key cannot hand it other rules, however consistent their digest.
A manifest this node's reasoning-gym cannot follow is refused too, in one line, and the node trains alone on
its own mix. Without a manifest nothing changes: the node's own settings, as before.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

from engine.config import NodeConfig
from engine.errors import SapoError
from engine.run.event_log import EventLog
from engine.sharing.swarm_client import SwarmClient
from engine.tasks.swarm_mix import SwarmMix, swarm_mix
from wire import events as ev
from wire.manifest import (SIGNER_PATTERN, Manifest, decode_manifest, manifest_bytes, manifest_digest, mix_summary,
                           signer_hex)

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
    digest = client.manifest_digest or manifest_digest(client.manifest)
    if (why := _against_pins(client, cfg, digest)) is not None:
        client.refuse(why)
        return cfg, None
    manifest, signer = client.manifest, client.manifest_signer
    recorded = _recorded(data_dir, cfg.swarm, events)
    replaced = recorded.replaced if recorded is not None else ()
    if signer is not None and bytes(signer) in replaced:
        client.refuse(f"relay {client.url} announces swarm {cfg.swarm}'s manifest signed by {signer_hex(signer)[:12]}, "
                      f"a key its operator replaced (with {signer_hex(recorded.signer)[:12]})")
        return cfg, None
    if recorded is not None and _keeps_record(client, cfg, recorded, events):
        manifest, signer = recorded.manifest, recorded.signer
        digest = manifest_digest(manifest)
    elif client.manifest_handed_from:
        old = (recorded.signer if recorded is not None and recorded.signer is not None
               else bytes.fromhex(cfg.manifest_signer) if cfg.manifest_signer else client.manifest_handed_from[-1])
        events.status(f"swarm {cfg.swarm}: manifest key {signer_hex(old)[:12]} handed over to "
                      f"{signer_hex(signer)[:12]}; the old keys are refused from now on")
        replaced = tuple(dict.fromkeys(replaced + client.manifest_handed_from))  # the chain's keys are retired
    try:
        mix = swarm_mix(manifest, digest, cfg.task_config, cfg.task_levels)
    except SapoError as exc:
        client.refuse(str(exc))
        return cfg, None
    client.joined, client.joined_signer = manifest, signer
    _record(data_dir, manifest, signer, replaced)
    for note in mix.notes:
        events.status(f"swarm {cfg.swarm}: {note}")
    events.emit(ev.SwarmManifest(state="adopted", swarm=manifest.swarm, digest=digest, mix=mix_summary(manifest),
                                 completions=manifest.completions, max_tokens=manifest.max_tokens,
                                 format_bonus=manifest.format_bonus, signer=signer_hex(signer),
                                 replaced=[signer_hex(k) for k in replaced]))
    cfg = dataclasses.replace(cfg, completions=manifest.completions, max_tokens=manifest.max_tokens,
                              format_bonus=manifest.format_bonus, tasks=[e.dataset for e in mix.mix],
                              task_weights={e.dataset: e.weight for e in mix.mix},
                              task_config={e.dataset: dict(e.config) for e in mix.mix},
                              task_levels=dict(mix.levels), manifest_digest=digest,
                              manifest_signer=signer_hex(signer) or cfg.manifest_signer)
    return cfg, mix


def _against_pins(client: SwarmClient, cfg: NodeConfig, digest: str) -> str | None:
    """Why the announced manifest is not the one the invite pins (its digest, its signer), in one line; or None."""
    if cfg.manifest_digest is not None and digest != cfg.manifest_digest:
        return (f"relay {client.url} announces manifest {digest[:12]} for swarm {cfg.swarm}, "
                f"but the invite pins {cfg.manifest_digest[:12]}")
    signer = signer_hex(client.manifest_signer)
    handed_from = {signer_hex(k) for k in client.manifest_handed_from}  # the pinned key handed over to this one
    if cfg.manifest_signer is not None and signer != cfg.manifest_signer and cfg.manifest_signer not in handed_from:
        signed = f"signed by {signer[:12]}" if signer else "unsigned"
        return (f"relay {client.url} announces a manifest for swarm {cfg.swarm} {signed}, "
                f"but the invite pins signer {cfg.manifest_signer[:12]}")
    return None


def _keeps_record(client: SwarmClient, cfg: NodeConfig, recorded: Recorded, events: EventLog) -> bool:
    """True when the node keeps the manifest it joined with: the announced one is a change (reported). A pinned
    digest, or a pinned signer other than the recorded one (or one it replaced), decides instead of the record: the
    invite names what to follow, moved on from the recorded one (the announced manifest has passed the pins already)."""
    known = {signer_hex(recorded.signer), *(signer_hex(k) for k in recorded.replaced)}
    if cfg.manifest_digest is not None or cfg.manifest_signer not in (None, *known):
        return False
    return client.tell_change(recorded.manifest, recorded.signer, events.emit)


class Recorded(NamedTuple):
    """What ``swarm-manifest.json`` holds: the manifest joined, its signer (None: unsigned), the keys it replaced."""

    manifest: Manifest
    signer: bytes | None
    replaced: tuple[bytes, ...] = ()


def _recorded(data_dir: Path, swarm: str, events: EventLog) -> Recorded | None:
    """The manifest this node joined ``swarm`` with before, its signer and the keys handed over from, if recorded and
    intact (else None, said). Records from before signed manifests hold no signer: they read as unsigned."""
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
        signer = record.get("signer", "")
        replaced = record.get("replaced", [])
        if not isinstance(replaced, list) or len(replaced) > 64:
            raise ValueError("its replaced keys are not a short list")
        for key in [signer, *replaced] if signer else replaced:
            if not (isinstance(key, str) and re.match(SIGNER_PATTERN, key)):
                raise ValueError(f"its signer {str(key)[:20]!r} is not 64 hex")
        return Recorded(decode_manifest(record.get("manifest"), record.get("digest")),
                        bytes.fromhex(signer) if signer else None, tuple(bytes.fromhex(k) for k in replaced))
    except (ValueError, TypeError) as exc:
        events.status(f"{path} does not hold up ({exc}): the relay's manifest is taken as new")
        return None


def _record(data_dir: Path, manifest: Manifest, signer: bytes | None, replaced: tuple[bytes, ...] = ()) -> None:
    """Atomically: the manifest this node follows in its swarm, the key that signed it (absent: unsigned), and the
    keys its operator handed over from (refused from then on)."""
    path = data_dir / RECORD
    tmp = path.with_suffix(".tmp")
    body: dict[str, Any] = {"swarm": manifest.swarm, "digest": manifest_digest(manifest),
                            "manifest": json.loads(manifest_bytes(manifest))}
    if signer is not None:
        body["signer"] = signer_hex(signer)
    if replaced:
        body["replaced"] = [signer_hex(k) for k in replaced]
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
