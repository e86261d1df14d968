"""Replacing the operator's manifest key: the old key signs a handover to the new one; nodes that pinned or joined
with the old key follow the new one without a change, record the old one as replaced, and refuse it from then on.
Real relays (``sapo-relay handover``, ``--manifest-key-handover``) and a scripted one for hostile chains."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.config import NodeConfig
from engine.run.event_log import EventLog
from engine.run.joining import RECORD, join
from engine.sharing.swarm_client import SwarmClient
from relay.swarms import load_swarms
from wire import events as ev
from wire.identity import Identity
from wire.manifest import (Manifest, ManifestTask, handover_chain, manifest_bytes, manifest_digest, sign_handover,
                           sign_manifest, signer_changes)
from wire.protocol import MAX_HANDOVERS, KeyHandover

import chromium
from fake_relay import FakeRelay
from relay_process import RelayProcess
from test_manifest_signing import SWARMS  # the same signed swarm of chain sums

OLD = Identity.from_seed(b"\x21" * 32)  # the operator's first manifest key
NEW = Identity.from_seed(b"\x22" * 32)  # its successor
NEWER = Identity.from_seed(b"\x23" * 32)
EVIL = Identity.from_seed(b"\x66" * 32)
NODE = Identity.from_seed(b"\x08" * 32)


# --- the chain itself (wire/manifest.py) ---------------------------------------------------------------------------

def test_a_chain_holds_link_by_link_and_names_the_keys_it_retires():
    one = sign_handover(OLD, NEW.public_key)
    two = sign_handover(NEW, NEWER.public_key)
    assert handover_chain(None, NEW.public_key) == handover_chain([], None) == ()
    assert handover_chain([one], NEW.public_key) == (OLD.public_key,)
    assert handover_chain([one, two], NEWER.public_key) == (OLD.public_key, NEW.public_key)
    bad = [
        ([one], NEWER.public_key, "does not verify"),  # OLD handed over to NEW, not to NEWER
        ([two, one], NEWER.public_key, "does not verify"),  # out of order
        ([KeyHandover(old=OLD.public_key, signature=sign_handover(EVIL, NEW.public_key).signature)],
         NEW.public_key, "does not verify"),  # a signature the old key did not make
        ([KeyHandover(old=OLD.public_key, signature=OLD.sign(b"manifest", NEW.public_key))], NEW.public_key,
         "does not verify"),  # the old key's signature for another purpose
        ([one], None, "unsigned manifest"),
        ([one, sign_handover(NEW, OLD.public_key)], OLD.public_key, "names one key twice"),  # a loop back
        ([one] * (MAX_HANDOVERS + 1), NEW.public_key, f"at most {MAX_HANDOVERS}"),
    ]
    for chain, signer, words in bad:
        with pytest.raises(ValueError, match=words):
            handover_chain(chain, signer)


def test_a_handed_over_signer_is_no_change():
    o, n, e = OLD.public_key, NEW.public_key, EVIL.public_key
    assert signer_changes(o, n, (o,)) == []
    assert signer_changes(o, e, (n,)) == [f"signed by another key ({e.hex()[:12]})"]  # not from the joined key
    assert signer_changes(o, None, (o,)) == ["no longer signed"]


# --- real relays ---------------------------------------------------------------------------------------------------

def _key_file(path: Path, key: Identity) -> Path:
    path.write_bytes(key.to_pem())
    path.chmod(0o600)
    return path


def _relay_cmd(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "relay", *args], capture_output=True, text=True, timeout=timeout)


def _cfg(url: str, **pins: str) -> NodeConfig:
    return NodeConfig(relay=url, swarm="sums", preset="easy", completions=8, max_tokens=96, format_bonus=0.0, **pins)


def _join(url: str, data_dir: Path, **pins: str) -> tuple[NodeConfig, Any, list[Any], SwarmClient]:
    seen: list[Any] = []
    events = EventLog()
    events.add(seen.append)
    c = SwarmClient(url, "sums", NODE, "smollm2-135m", None, on_status=events.status, on_manifest=events.emit,
                    timeout_s=5)
    try:
        cfg, mix = join(c, _cfg(url, **pins), data_dir, events)
    finally:
        c.close()
    return cfg, mix, seen, c


def _of(seen: list[Any], state: str) -> list[ev.SwarmManifest]:
    return [e for e in seen if isinstance(e, ev.SwarmManifest) and e.state == state]


def _said(seen: list[Any]) -> list[str]:
    return [e.message for e in seen if isinstance(e, ev.Status)]


def test_the_operator_hands_over_and_nodes_on_the_old_key_follow_then_refuse_it(tmp_path):
    swarms = tmp_path / "swarms.toml"
    swarms.write_text(SWARMS)
    old, new = _key_file(tmp_path / "old.pem", OLD), _key_file(tmp_path / "new.pem", NEW)
    digest = load_swarms(swarms)[0]["sums"].digest
    node_a, node_b = tmp_path / "a", tmp_path / "b"
    node_a.mkdir()
    node_b.mkdir()

    # Before: the relay signs with OLD; node a joins with no pin and records OLD.
    relay = RelayProcess(tmp_path / "r1", "--swarms", str(swarms), "--manifest-key", str(old)).start()
    try:
        _, mix, seen, _ = _join(relay.url, node_a)
        assert mix is not None and _of(seen, "adopted")[0].signer == OLD.public_key.hex()
    finally:
        relay.stop()

    # The operator makes the handover; bad uses of the command are one line and exit 2, nothing written.
    handover = tmp_path / "handover.json"
    out = _relay_cmd("handover", str(old), str(new), str(handover))
    assert out.returncode == 0, out.stderr
    assert f"{OLD.public_key.hex()[:12]} -> {NEW.public_key.hex()[:12]}" in out.stdout
    body = json.loads(handover.read_text())
    assert body["to"] == NEW.public_key.hex() and [h["old"] for h in body["handovers"]] == [OLD.public_key.hex()]
    for args, words in ((["handover", str(old), str(new), str(handover)], "exists: not overwritten"),
                        (["handover", str(old), str(old), str(tmp_path / "x.json")], "hold the same key"),
                        (["handover", str(tmp_path / "none.pem"), str(new), str(tmp_path / "y.json")],
                         "cannot read --manifest-key")):
        out = _relay_cmd(*args)
        assert out.returncode == 2 and words in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "y.json").exists()
    # A relay given a handover that does not end at its key, or a handover without a key, stops before it listens.
    for args, words in ((["--manifest-key", str(_key_file(tmp_path / "evil.pem", EVIL))], "not to the --manifest-key"),
                        ([], "give that too")):
        out = _relay_cmd("--port", "0", "--data-dir", str(tmp_path / "rx"), "--swarms", str(swarms), *args,
                         "--manifest-key-handover", str(handover))
        assert out.returncode == 2 and words in out.stderr, out.stderr

    # After: the relay signs with NEW and serves the handover.
    relay = RelayProcess(tmp_path / "r2", "--swarms", str(swarms), "--manifest-key", str(new),
                         "--manifest-key-handover", str(handover)).start()
    try:
        (listed,) = json.loads(relay.get("/swarms"))["swarms"]
        assert listed["signer"] == NEW.public_key.hex() and [h["old"] for h in listed["handovers"]] == [OLD.public_key.hex()]
        assert handover_chain([KeyHandover(old=bytes.fromhex(h["old"]), signature=bytes.fromhex(h["signature"]))
                               for h in listed["handovers"]], bytes.fromhex(listed["signer"])) == (OLD.public_key,)
        # The status page says so beside the signer, and names the replaced key on hover.
        dom = chromium.Dom(chromium.dump_dom(chromium.require(), relay.http + "/"))
        assert dom.rows["public"][1][4] == NEW.public_key.hex()[:16] + "\u2026 (replaces an older key)"
        title = f"{NEW.public_key.hex()}\nreplaces {OLD.public_key.hex()}"
        assert any(tag == "span" and attrs.get("title") == title for tag, attrs in dom.tags), title
        # Node a (joined with OLD) follows NEW: the same rules, no change reported; its record now names NEW and
        # OLD as replaced.
        _, mix, seen, c = _join(relay.url, node_a)
        assert mix is not None and not _of(seen, "changed") and c.joined_signer == NEW.public_key
        assert _of(seen, "adopted")[0].signer == NEW.public_key.hex()
        assert _of(seen, "adopted")[0].replaced == [OLD.public_key.hex()]  # the app names the replaced key
        assert any("handed over to" in s and "refused from now on" in s for s in _said(seen)), _said(seen)
        record = json.loads((node_a / RECORD).read_text())
        assert record["signer"] == NEW.public_key.hex() and record["replaced"] == [OLD.public_key.hex()]
        # Node b, new, by an old invite that pins OLD: it follows NEW too.
        cfg, mix, seen, _ = _join(relay.url, node_b, manifest_signer=OLD.public_key.hex(), manifest_digest=digest)
        assert mix is not None and cfg.manifest_signer == NEW.public_key.hex() and not _of(seen, "refused")
    finally:
        relay.stop()

    # Later a relay signs with OLD again (a leaked key, or a replica left behind): both nodes refuse it, node b
    # though its invite still pins OLD.
    relay = RelayProcess(tmp_path / "r3", "--swarms", str(swarms), "--manifest-key", str(old)).start()
    try:
        for node, pins in ((node_a, {}), (node_b, {"manifest_signer": OLD.public_key.hex()})):
            cfg, mix, seen, c = _join(relay.url, node, **pins)
            (refused,) = _of(seen, "refused")
            assert mix is None and cfg.completions == 8, refused.reason  # alone, on its own settings
            assert f"signed by {OLD.public_key.hex()[:12]}, a key its operator replaced" in refused.reason
            assert json.loads((node / RECORD).read_text())["signer"] == NEW.public_key.hex()  # untouched
    finally:
        relay.stop()


def test_a_chain_extends_so_nodes_two_keys_behind_follow(tmp_path):
    swarms = tmp_path / "swarms.toml"
    swarms.write_text(SWARMS)
    keys = [_key_file(tmp_path / f"k{i}.pem", k) for i, k in enumerate((OLD, NEW, NEWER))]
    first, second = tmp_path / "h1.json", tmp_path / "h2.json"
    assert _relay_cmd("handover", str(keys[0]), str(keys[1]), str(first)).returncode == 0
    out = _relay_cmd("handover", str(keys[1]), str(keys[2]), str(second), "--after", str(first))
    assert out.returncode == 0 and "(2 in the chain)" in out.stdout, out.stderr
    # --after a file that does not end at the old key: refused, one line.
    out = _relay_cmd("handover", str(keys[0]), str(keys[2]), str(tmp_path / "h3.json"), "--after", str(first))
    assert out.returncode == 2 and "not to the --manifest-key" in out.stderr
    relay = RelayProcess(tmp_path / "r", "--swarms", str(swarms), "--manifest-key", str(keys[2]),
                         "--manifest-key-handover", str(second)).start()
    try:
        cfg, mix, seen, _ = _join(relay.url, tmp_path, manifest_signer=OLD.public_key.hex())
        assert mix is not None and cfg.manifest_signer == NEWER.public_key.hex()
        record = json.loads((tmp_path / RECORD).read_text())
        assert record["replaced"] == [OLD.public_key.hex(), NEW.public_key.hex()]
    finally:
        relay.stop()


class ScriptedRelay(FakeRelay):
    def __init__(self, manifest: Manifest, signer: Identity, handovers: list[KeyHandover]) -> None:
        super().__init__(server_version="scripted/1", manifest=json.loads(manifest_bytes(manifest)),
                         manifest_digest=manifest_digest(manifest), manifest_signer=signer.public_key,
                         manifest_signature=sign_manifest(signer, manifest), manifest_handovers=handovers)


def test_a_forged_handover_is_refused_by_a_node_that_pins_the_old_key(tmp_path):
    # A relay host without the operator's key signs the rules with its own key and claims a handover from the
    # operator's: the chain does not verify, so the node refuses the relay and trains alone.
    m = Manifest(swarm="sums", tasks=[ManifestTask("chain_sum")], completions=4, max_tokens=24)
    forged = KeyHandover(old=OLD.public_key, signature=EVIL.sign(b"manifest-key-handover", EVIL.public_key))
    with ScriptedRelay(m, EVIL, [forged]) as relay:
        cfg, mix, seen, c = _join(relay.url, tmp_path, manifest_signer=OLD.public_key.hex())
    (refused,) = _of(seen, "refused")
    assert mix is None and "does not verify" in refused.reason and not (tmp_path / RECORD).exists()
    # Without any handover, EVIL's signature fails the pin, as before.
    with ScriptedRelay(m, EVIL, []) as relay:
        cfg, mix, seen, c = _join(relay.url, tmp_path, manifest_signer=OLD.public_key.hex())
    assert mix is None and "but the invite pins signer" in _of(seen, "refused")[0].reason
