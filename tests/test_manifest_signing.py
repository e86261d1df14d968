"""Signed manifests (issue 24): the operator signs each swarm's manifest with the relay's manifest key
(``sapo-relay --manifest-key``); a node that pins the key (an invite's ``signer``) follows only what it signed,
records the signer beside the digest, and reports a manifest signed by another key, or no longer signed, as a change.

Real relay processes on 127.0.0.1, the real SwarmClient and joining code; a relay that forges or mangles the
signature is a small websockets server written for the test, speaking the protocol's frames."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine.config import NodeConfig, build_config
from engine.errors import SapoError
from engine.run.event_log import EventLog
from engine.run.joining import RECORD, join
from engine.run.runner import invite_settings
from engine.sharing.swarm_client import SwarmClient
from relay.swarms import load_swarms
from wire import events as ev
from wire import protocol as p
from wire.identity import Identity
from wire.invite import parse_invite
from wire.manifest import (Manifest, ManifestTask, manifest_bytes, manifest_digest, manifest_signature_ok,
                           sign_manifest, signer_changes, signer_hex)

import chromium
from fake_relay import FakeRelay
from relay_process import RelayProcess

KEY = Identity.from_seed(b"\x11" * 32)  # the operator's manifest key
EVIL = Identity.from_seed(b"\x66" * 32)  # someone else's: a relay host or replica that lacks the operator's
NODE = Identity.from_seed(b"\x07" * 32)
SWARMS = """
[swarms.sums]
description = "Sums, signed"
completions = 4
max_tokens = 24
[swarms.sums.tasks.chain_sum]
config = { min_terms = 2, max_terms = 2, min_digits = 1, max_digits = 1 }
"""


# --- the signature itself (wire/manifest.py) -------------------------------------------------------------------

def _small(swarm: str = "sums", max_tokens: int = 24) -> Manifest:
    return Manifest(swarm=swarm, tasks=[ManifestTask("chain_sum")], completions=4, max_tokens=max_tokens)


def test_a_signature_holds_for_its_manifest_swarm_key_and_purpose_only():
    m = _small()
    signature = sign_manifest(KEY, m)
    assert manifest_signature_ok(KEY.public_key, signature, m)
    assert not manifest_signature_ok(KEY.public_key, signature, _small(max_tokens=25))  # the rules changed
    assert not manifest_signature_ok(KEY.public_key, signature, _small(swarm="other"))  # another swarm's
    assert not manifest_signature_ok(EVIL.public_key, signature, m)  # another key
    assert not manifest_signature_ok(KEY.public_key, sign_manifest(EVIL, m), m)
    flipped = signature[:-1] + bytes([signature[-1] ^ 1])
    assert not manifest_signature_ok(KEY.public_key, flipped, m)
    # The same parts signed for another purpose (wire.identity's domain separation) say nothing about a manifest.
    as_hello = KEY.sign(p.HELLO, m.swarm.encode(), bytes.fromhex(manifest_digest(m)))
    assert not manifest_signature_ok(KEY.public_key, as_hello, m)
    # A manifest decoded from its JSON (weights as floats) is the same manifest: the signature still holds.
    again = msgspec.json.decode(manifest_bytes(m), type=Manifest)
    assert manifest_signature_ok(KEY.public_key, signature, again)
    assert signer_hex(KEY.public_key) == KEY.public_key.hex() and len(signer_hex(KEY.public_key)) == 64
    assert signer_hex(None) == ""


def test_which_signer_differences_count_as_a_change():
    k, e = KEY.public_key, EVIL.public_key
    assert signer_changes(None, None) == signer_changes(k, k) == []
    assert signer_changes(None, k) == []  # joined unsigned, signed now: the same rules, taken with their signer
    assert signer_changes(k, None) == ["no longer signed"]
    assert signer_changes(k, e) == [f"signed by another key ({e.hex()[:12]})"]


def test_the_setting_takes_64_hex_only():
    assert build_config({}, {"manifest_signer": KEY.public_key.hex()}).manifest_signer == KEY.public_key.hex()
    for bad in ("AB" * 32, "ab" * 31, "zz" * 32):
        with pytest.raises(SapoError, match=r"manifest signer must be 64 lowercase hex digits \(an Ed25519 public"):
            build_config({}, {"manifest_signer": bad})


# --- a real relay with a manifest key ---------------------------------------------------------------------------

def _key_file(path: Path, key: Identity = KEY) -> Path:
    path.write_bytes(key.to_pem())
    path.chmod(0o600)
    return path


def _swarms_file(tmp: Path) -> Path:
    path = tmp / "swarms.toml"
    path.write_text(SWARMS)
    return path


@pytest.fixture(scope="module")
def signed_relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayProcess]:
    tmp = tmp_path_factory.mktemp("signed")
    relay = RelayProcess(tmp / "relay", "--swarms", str(_swarms_file(tmp)), "--manifest-key",
                         str(_key_file(tmp / "manifest.key"))).start()
    yield relay
    relay.stop()


def _manifest(tmp: Path) -> tuple[Manifest, str]:
    """The swarm as the relay declares it (relay/swarms.py reads the same file)."""
    entry = load_swarms(_swarms_file(tmp))[0]["sums"]
    return entry.manifest, entry.digest


def _cfg(relay_url: str, **pins: str) -> NodeConfig:
    return NodeConfig(relay=relay_url, swarm="sums", preset="easy", completions=8, max_tokens=96, format_bonus=0.0,
                      **pins)


def _events() -> tuple[EventLog, list[Any]]:
    seen: list[Any] = []
    events = EventLog()
    events.add(seen.append)
    return events, seen


def _client(url: str, events: EventLog, me: Identity = NODE) -> SwarmClient:
    return SwarmClient(url, "sums", me, "smollm2-135m", None, on_status=events.status, on_manifest=events.emit,
                       timeout_s=5)


def _manifest_events(seen: list[Any], state: str) -> list[ev.SwarmManifest]:
    return [e for e in seen if isinstance(e, ev.SwarmManifest) and e.state == state]


def test_a_node_joins_by_a_signed_invite_and_records_the_signer(signed_relay, tmp_path):
    manifest, digest = _manifest(tmp_path)
    # GET /swarms lists the digest, the signer and its signature: anyone can check them without joining.
    (listed,) = json.loads(signed_relay.get("/swarms"))["swarms"]
    assert listed["digest"] == digest and listed["signer"] == KEY.public_key.hex()
    assert manifest_signature_ok(bytes.fromhex(listed["signer"]), bytes.fromhex(listed["signature"]), manifest)
    # The operator's invite pins the digest and the signer; the node's settings come from it.
    out = subprocess.run([sys.executable, "-m", "relay", "invite", "sums", "--swarms", str(_swarms_file(tmp_path)),
                          "--url", signed_relay.url, "--manifest-key", str(_key_file(tmp_path / "k.pem"))],
                         capture_output=True, text=True, check=True, timeout=60)
    link = out.stdout.splitlines()[0]
    invite = parse_invite(link)
    assert invite.manifest_signer == KEY.public_key.hex() and invite.manifest_digest == digest
    cfg = build_config({}, {**invite_settings(link), "preset": "easy", "completions": 8, "max_tokens": 96,
                            "format_bonus": 0.0})
    assert cfg.manifest_signer == KEY.public_key.hex()
    events, seen = _events()
    c = _client(signed_relay.url, events)
    try:
        cfg, mix = join(c, cfg, tmp_path, events)
        assert c.manifest_signer == KEY.public_key and c.joined_signer == KEY.public_key
        assert mix is not None and mix.digest == digest and cfg.max_tokens == 24
        (adopted,) = _manifest_events(seen, "adopted")
        assert adopted.signer == KEY.public_key.hex() and adopted.digest == digest
        record = json.loads((tmp_path / RECORD).read_text())
        assert record["digest"] == digest and record["signer"] == KEY.public_key.hex()
    finally:
        c.close()


def test_a_pinned_signer_that_did_not_sign_it_is_refused_and_the_node_trains_alone(signed_relay, tmp_path):
    events, seen = _events()
    c = _client(signed_relay.url, events)
    cfg, mix = join(c, _cfg(signed_relay.url, manifest_signer=EVIL.public_key.hex()), tmp_path, events)
    assert mix is None and cfg.completions == 8  # its own settings
    (refused,) = _manifest_events(seen, "refused")
    assert (f"signed by {KEY.public_key.hex()[:12]}, but the invite pins signer {EVIL.public_key.hex()[:12]}"
            in refused.reason)
    assert "\n" not in refused.reason
    assert not c.ensure_connected() and c.sample(4, None) == []  # alone from now on
    assert not (tmp_path / RECORD).exists()


def test_a_record_from_before_signatures_takes_the_signer_of_the_same_manifest(signed_relay, tmp_path):
    manifest, digest = _manifest(tmp_path)
    (tmp_path / RECORD).write_text(json.dumps({"swarm": "sums", "digest": digest,
                                               "manifest": json.loads(manifest_bytes(manifest))}))
    events, seen = _events()
    c = _client(signed_relay.url, events)
    try:
        cfg, mix = join(c, _cfg(signed_relay.url), tmp_path, events)
        assert mix is not None and not _manifest_events(seen, "changed")  # the same rules: no change to report
        assert json.loads((tmp_path / RECORD).read_text())["signer"] == KEY.public_key.hex()
    finally:
        c.close()


# --- relays that lack the key ----------------------------------------------------------------------------------

class ScriptedRelay(FakeRelay):
    """Welcomes anyone with ``manifest`` and whatever signer and signature it is given; answers the rest blandly."""

    def __init__(self, manifest: Manifest, signer: bytes | None, signature: bytes | None,
                 digest: str | None = None) -> None:
        super().__init__(server_version="scripted/1", manifest=json.loads(manifest_bytes(manifest)),
                         manifest_digest=digest or manifest_digest(manifest), manifest_signer=signer,
                         manifest_signature=signature)


def _forged() -> list[tuple[str, bytes | None, bytes | None, str]]:
    m = _small()
    return [
        ("garbage signature", KEY.public_key, secrets.token_bytes(64), "does not verify"),
        ("another key's signature, the operator's name", KEY.public_key, sign_manifest(EVIL, m), "does not verify"),
        ("the operator's signature of other rules", KEY.public_key, sign_manifest(KEY, _small(max_tokens=25)),
         "does not verify"),
        ("the operator's signature for another swarm", KEY.public_key, sign_manifest(KEY, _small(swarm="other")),
         "does not verify"),
        ("a signer without a signature", KEY.public_key, None, "without a signature"),
        ("a signature without a signer", None, sign_manifest(KEY, m), "without its signer"),
    ]


@pytest.mark.parametrize(("why", "signer", "signature", "words"), _forged(), ids=[f[0] for f in _forged()])
def test_a_manifest_whose_signature_does_not_hold_is_refused(tmp_path, why, signer, signature, words):
    events, seen = _events()
    with ScriptedRelay(_small(), signer, signature) as relay:
        c = _client(relay.url, events)
        cfg, mix = join(c, _cfg(relay.url), tmp_path, events)
    assert mix is None and c.refused is not None and not c.connected
    (refused,) = _manifest_events(seen, "refused")
    assert "sent a swarm manifest this node refuses" in refused.reason and words in refused.reason
    assert "\n" not in refused.reason
    assert not (tmp_path / RECORD).exists()


def test_an_unsigned_manifest_is_refused_where_the_invite_pins_a_signer(tmp_path):
    events, seen = _events()
    with ScriptedRelay(_small(), None, None) as relay:
        c = _client(relay.url, events)
        cfg, mix = join(c, _cfg(relay.url, manifest_signer=KEY.public_key.hex()), tmp_path, events)
        assert mix is None and not c.connected
    (refused,) = _manifest_events(seen, "refused")
    assert f"unsigned, but the invite pins signer {KEY.public_key.hex()[:12]}" in refused.reason


def test_a_manifest_signed_by_another_key_is_a_change_not_followed(tmp_path):
    manifest, digest = _manifest(tmp_path)
    events, seen = _events()
    with ScriptedRelay(manifest, KEY.public_key, sign_manifest(KEY, manifest)) as relay:
        c = _client(relay.url, events)
        join(c, _cfg(relay.url), tmp_path, events)
        c.close()
    assert json.loads((tmp_path / RECORD).read_text())["signer"] == KEY.public_key.hex()
    # The same rules, now signed by a key the node did not join with (validly), then not signed at all.
    for signer, signature, words in ((EVIL.public_key, sign_manifest(EVIL, manifest),
                                      f"signed by another key ({EVIL.public_key.hex()[:12]})"),
                                     (None, None, "no longer signed")):
        seen.clear()
        with ScriptedRelay(manifest, signer, signature) as relay:
            c = _client(relay.url, events)
            cfg, mix = join(c, _cfg(relay.url), tmp_path, events)
            c.close()
        (changed,) = _manifest_events(seen, "changed")
        assert changed.changes == [words] and changed.joined_signer == KEY.public_key.hex()
        assert changed.signer == signer_hex(signer) and changed.digest == changed.joined_digest == digest
        (adopted,) = _manifest_events(seen, "adopted")  # the one it joined with, and its signer
        assert adopted.signer == KEY.public_key.hex() and c.joined_signer == KEY.public_key
        assert mix is not None and json.loads((tmp_path / RECORD).read_text())["signer"] == KEY.public_key.hex()


def _connect(c: SwarmClient, timeout: float = 20) -> None:
    """Retry as the node does (the client's own backoff) until a relay answers."""
    deadline = time.monotonic() + timeout
    while not c.ensure_connected():
        assert c.refused is None and time.monotonic() < deadline, c.refused or "no relay answered"
        time.sleep(0.2)


def test_a_replica_without_the_key_is_reported_once_when_the_node_moves_to_it(tmp_path):
    manifest, digest = _manifest(tmp_path)
    relay = RelayProcess(tmp_path / "relay", "--swarms", str(_swarms_file(tmp_path)), "--manifest-key",
                         str(_key_file(tmp_path / "manifest.key"))).start()
    events, seen = _events()
    with ScriptedRelay(manifest, None, None) as replica:
        c = _client(f"{relay.url},{replica.url}", events)
        try:
            cfg, mix = join(c, _cfg(relay.url), tmp_path, events)
            assert mix is not None and c.joined_signer == KEY.public_key
            relay.stop()  # the keyed relay goes; the node's next try is the replica
            c.close()
            _connect(c)
            assert c.url == replica.url and c.manifest_signer is None
            (changed,) = _manifest_events(seen, "changed")
            assert changed.changes == ["no longer signed"] and changed.digest == digest
            assert c.joined == mix.manifest and c.joined_signer == KEY.public_key  # kept, not followed
            c.close()
            _connect(c)  # told once, not at every reconnection
            assert len(_manifest_events(seen, "changed")) == 1
        finally:
            c.close()
            relay.stop()


def test_the_status_page_shows_who_signed_each_public_swarms_rules(signed_relay, tmp_path):
    browser = chromium.require()
    dom = chromium.Dom(chromium.dump_dom(browser, signed_relay.http + "/"))
    header, row = dom.rows["public"][:2]
    assert header[4] == "rules signed by"
    assert row[0] == "sums" and row[4] == KEY.public_key.hex()[:16] + "\u2026"
    assert ("span", {"class": "name", "title": KEY.public_key.hex()}) in dom.tags  # the whole key on hover
    unsigned = RelayProcess(tmp_path / "relay", "--swarms", str(_swarms_file(tmp_path))).start()
    try:
        dom = chromium.Dom(chromium.dump_dom(browser, unsigned.http + "/"))
    finally:
        unsigned.stop()
    assert dom.rows["public"][1][4] == "not signed"
