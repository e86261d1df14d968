"""Swarm manifests: the relay's --swarms file checked at start, handed out in the welcome (protocol v3), listed at
GET /swarms; a node's mix and admission from it; pinned, recorded and refused manifests. Real relay on 127.0.0.1."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
from websockets.sync.client import connect

from engine.config import NodeConfig
from engine.run.event_log import EventLog, terminal_printer
from engine.run.joining import RECORD, follow, join, pending
from engine.sharing.swarm_client import SwarmClient
from engine.tasks.questions import QuestionStream, admit
from engine.tasks.swarm_mix import swarm_mix
from relay.swarms import load_swarms
from wire import events as ev
from wire.identity import Identity
from wire.manifest import Manifest, ManifestTask, decode_manifest, manifest_digest
from wire.protocol import TaskSpec

from relay_process import RelayProcess

A, B = (Identity.from_seed(bytes([i]) * 32) for i in (7, 8))
GOOD = """
[swarms.arithmetic]
description = "Small sums for small models"
completions = 4
max_tokens = 48
format_bonus = 0.1
models = ["smollm2-135m", "gemma-3-270m"]

[swarms.arithmetic.tasks.basic_arithmetic]
weight = 2.0
config = { min_terms = 2, max_terms = 2, min_digits = 1, operators = ["+", "-"], allow_parentheses = false, allow_negation = false }
ranges = { max_digits = [1, 2] }

[swarms.arithmetic.tasks.chain_sum]
config = { min_terms = 2, max_terms = 2, min_digits = 1, max_digits = 1 }

[swarms.secret]
public = false
token = "s3cret"
completions = 4
max_tokens = 48
[swarms.secret.tasks.gcd]
levels = [0, 2]
"""


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "swarms.toml"
    path.write_text(text)
    return path


def test_a_good_file_gives_each_swarm_its_manifest_and_digest(tmp_path):
    swarms, _ = load_swarms(_file(tmp_path, GOOD))
    assert set(swarms) == {"arithmetic", "secret"}
    a = swarms["arithmetic"]
    assert a.manifest.tasks[0].ranges == {"max_digits": [1, 2]} and a.manifest.tasks[0].weight == 2.0
    assert a.digest == manifest_digest(a.manifest) and len(a.digest) == 64
    assert swarms["secret"].token == "s3cret" and not swarms["secret"].manifest.public
    # The digest is of the content: the same file reads to the same digest, any change to another.
    again, _ = load_swarms(_file(tmp_path, GOOD))
    assert again["arithmetic"].digest == a.digest
    changed, _ = load_swarms(_file(tmp_path, GOOD.replace("max_tokens = 48", "max_tokens = 64", 1)))
    assert changed["arithmetic"].digest != a.digest


BAD = [
    ("unknown dataset", GOOD.replace("tasks.chain_sum]", "tasks.no_such_task]"), "swarm 'arithmetic'", "no_such_task"),
    ("range outside the caps", GOOD.replace("[1, 2]", "[1, 9]"), "swarm 'arithmetic'", "ranges.max_digits"),
    ("reasoning-gym rejects", GOOD.replace('operators = ["+", "-"]', 'operators = ["^"]'), "swarm 'arithmetic'",
     "reasoning-gym rejects"),
    ("size over the protocol's bound", GOOD.replace("Small sums for small models", "x" * 300), "swarm 'arithmetic'",
     "description"),
    ("L over the bound", GOOD.replace("completions = 4", "completions = 500", 1), "swarm 'arithmetic'", "completions"),
    ("private without a token", GOOD.replace('token = "s3cret"\n', ""), "swarm 'secret'", "token"),
    ("setting not capped", GOOD.replace("min_digits = 1, max_digits = 1", "min_digits = 1, max_digits = 1, seed = 3"),
     "swarm 'arithmetic'", "seed"),
    ("unknown field", GOOD.replace("format_bonus = 0.1", "format_bonus = 0.1\ncolour = 1"), "swarm 'arithmetic'",
     "colour"),
    ("bonus over the maximum", GOOD.replace("format_bonus = 0.1", "format_bonus = 2.0"), "swarm 'arithmetic'",
     "format_bonus"),
]


@pytest.mark.parametrize(("why", "text", "swarm", "field"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_file_stops_the_relay_with_one_line_naming_swarm_and_field(tmp_path, why, text, swarm, field):
    with pytest.raises(ValueError) as err:
        load_swarms(_file(tmp_path, text))
    assert swarm in str(err.value) and field in str(err.value) and "\n" not in str(err.value)


def test_a_required_field_left_out_is_named_once(tmp_path):
    # msgspec names no path for a top-level field: it was read as the path, "completions: Object missing ... `completions"
    with pytest.raises(ValueError) as err:
        load_swarms(_file(tmp_path, GOOD.replace("completions = 4\n", "", 1)))
    assert str(err.value) == "swarm 'arithmetic': completions: Object missing required field `completions`"


def test_sapo_relay_exits_2_on_a_bad_manifest(tmp_path):
    bad = _file(tmp_path, GOOD.replace("[1, 2]", "[1, 9]"))
    done = subprocess.run([sys.executable, "-m", "relay", "--port", "0", "--data-dir", str(tmp_path / "d"),
                           "--swarms", str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "swarm 'arithmetic'" in lines[0] and "max_digits" in lines[0], done.stderr


@pytest.fixture
def relay(tmp_path):
    r = RelayProcess(tmp_path / "relay", "--swarms", str(_file(tmp_path, GOOD))).start()
    yield r
    r.stop()


def _client(relay: RelayProcess, me: Identity, swarm: str = "arithmetic", token: str | None = None,
            log: list[object] | None = None) -> SwarmClient:
    log = [] if log is None else log
    return SwarmClient(relay.url, swarm, me, "smollm2-135m", token, on_status=log.append, on_manifest=log.append,
                       timeout_s=5)


def test_the_relay_hands_each_joining_node_its_swarms_manifest(relay, tmp_path):
    expected, _ = load_swarms(_file(tmp_path, GOOD))
    c = _client(relay, A)
    assert c.ensure_connected()
    assert c.manifest == expected["arithmetic"].manifest and c.manifest_digest == expected["arithmetic"].digest
    c.close()
    with pytest.raises(Exception, match="private: it needs its token"):
        _client(relay, A, swarm="secret").ensure_connected()
    s = _client(relay, B, swarm="secret", token="s3cret")
    assert s.ensure_connected() and s.manifest is not None and s.manifest.tasks[0].levels == [0, 2]
    s.close()
    with pytest.raises(Exception, match="serves no swarm 'other'.*arithmetic"):
        _client(relay, A, swarm="other").ensure_connected()


def test_a_node_of_the_previous_protocol_gets_a_clear_refusal(relay):
    hello = {"type": "hello", "v": 2, "swarm": "arithmetic", "public_key": msgspec.json.decode(
        msgspec.json.encode(A.public_key)), "model": "m", "client_version": "old"}
    with connect(relay.url) as ws:
        ws.send(json.dumps(hello))
        reply = json.loads(ws.recv(timeout=5))
    assert reply["type"] == "error" and reply["code"] == "version"
    assert "version 2 is not supported: use version 3 (update sapo-swarm)" in reply["reason"]


def test_get_swarms_lists_the_public_swarms_only(relay):
    body = json.loads(relay.get("/swarms"))
    assert [s["swarm"] for s in body["swarms"]] == ["arithmetic"]
    s = body["swarms"][0]
    assert s["description"] == "Small sums for small models" and s["models"] == ["smollm2-135m", "gemma-3-270m"]
    assert s["tasks"] == ["basic_arithmetic x2 max_digits 1..2", "chain_sum"] and s["peers_online"] == 0
    assert "s3cret" not in relay.get("/swarms") + relay.get("/api/swarms")
    assert json.loads(relay.get("/api/swarms"))["public"] == body["swarms"]  # what the status page lists


# --- the node's side -------------------------------------------------------------------------------------------

def _manifest(tmp_path: Path) -> Manifest:
    return load_swarms(_file(tmp_path, GOOD))[0]["arithmetic"].manifest


def test_a_node_draws_at_its_own_value_and_admits_any_value_in_the_range(tmp_path):
    m = _manifest(tmp_path)
    mine = swarm_mix(m, manifest_digest(m), {"basic_arithmetic": {"max_digits": 2}}, {})
    other = swarm_mix(m, manifest_digest(m), {}, {})
    assert dict(mine.mix[0].config)["max_digits"] == 2 and dict(other.mix[0].config)["max_digits"] == 1
    assert [e.weight for e in mine.mix] == [2.0, 1.0]
    # Each admits the other's draws: no foreign_task between nodes that chose differently within the range.
    for a, b in ((mine, other), (other, mine)):
        for q in QuestionStream(b.mix, "peer", 0, []).draw(6):
            assert admit(q.spec, a.mix, swarm=a.admits) is None
    outside = TaskSpec(dataset="basic_arithmetic", config={**dict(mine.mix[0].config), "max_digits": 3}, seed=1,
                       index=0)
    assert admit(outside, mine.mix, swarm=mine.admits) == "foreign_task"
    gcd = TaskSpec(dataset="gcd", config={}, seed=1, index=0)
    assert admit(gcd, mine.mix, swarm=mine.admits) == "foreign_task"


def test_a_level_range_bounds_a_nodes_levels_and_what_it_admits(tmp_path):
    m = load_swarms(_file(tmp_path, GOOD))[0]["secret"].manifest
    mix = swarm_mix(m, manifest_digest(m), {}, {"gcd": 5})
    assert mix.bounds["gcd"][0] == 0 and mix.levels["gcd"] == mix.bounds["gcd"][1] <= 2  # clamped into the range
    from engine.tasks import frontier

    ladder = frontier.ladder("gcd", {})
    assert all(mix.admits(TaskSpec(dataset="gcd", config=c, seed=0, index=0)) for c in ladder[:mix.bounds["gcd"][1] + 1])
    if len(ladder) > 3:
        assert not mix.admits(TaskSpec(dataset="gcd", config=ladder[3], seed=0, index=0))


def _cfg(relay: RelayProcess, **kw) -> NodeConfig:
    return NodeConfig(relay=relay.url, swarm="arithmetic", preset="easy", completions=8, max_tokens=96,
                      format_bonus=0.0, **kw)


def test_joining_adopts_records_and_then_reports_a_change_instead_of_following_it(relay, tmp_path):
    seen: list[object] = []
    events = EventLog()
    events.add(seen.append)
    c = _client(relay, A)
    cfg, mix = join(c, _cfg(relay), tmp_path, events)
    m = _manifest(tmp_path)
    assert mix is not None and cfg.completions == 4 and cfg.max_tokens == 48 and cfg.format_bonus == 0.1
    assert cfg.tasks == ["basic_arithmetic", "chain_sum"] and cfg.manifest_digest == manifest_digest(m)
    adopted = [e for e in seen if isinstance(e, ev.SwarmManifest)]
    assert adopted[0].state == "adopted" and adopted[0].digest == manifest_digest(m)
    assert adopted[0].mix == ["basic_arithmetic x2 max_digits 1..2", "chain_sum"]
    assert json.loads((tmp_path / RECORD).read_text())["digest"] == manifest_digest(m)
    c.close()
    # The operator changes the swarm: a node that joined before keeps its manifest and says what changed.
    record = json.loads((tmp_path / RECORD).read_text())
    older = msgspec.convert({**record["manifest"], "max_tokens": 64}, Manifest)
    (tmp_path / RECORD).write_text(json.dumps({"swarm": "arithmetic", "digest": manifest_digest(older),
                                               "manifest": msgspec.to_builtins(older)}))
    seen.clear()
    c = _client(relay, A)
    cfg, mix = join(c, _cfg(relay), tmp_path, events)
    kinds = [(e.state, e.changes) for e in seen if isinstance(e, ev.SwarmManifest)]
    assert kinds[0] == ("changed", ["max_tokens"]) and kinds[1][0] == "adopted"
    assert cfg.max_tokens == 64 and mix is not None and mix.digest == manifest_digest(older)
    c.close()


def test_a_pinned_digest_that_differs_is_refused_and_the_node_trains_alone(relay, tmp_path):
    seen: list[object] = []
    events = EventLog()
    events.add(seen.append)
    c = _client(relay, A, log=seen)
    cfg, mix = join(c, _cfg(relay, manifest_digest="0" * 64), tmp_path, events)
    assert mix is None and cfg.completions == 8  # its own settings
    refused = [e for e in seen if isinstance(e, ev.SwarmManifest)]
    assert refused[0].state == "refused" and "pins 000000000000" in refused[0].reason
    assert not c.ensure_connected() and c.sample(4, None) == []  # alone from now on
    assert not (tmp_path / RECORD).exists()


def test_a_manifest_with_a_wrong_digest_or_over_the_bounds_is_refused():
    good = Manifest(swarm="s", tasks=[ManifestTask("chain_sum")], completions=4, max_tokens=32)
    data = msgspec.to_builtins(good)
    with pytest.raises(ValueError, match="digest does not match"):
        decode_manifest(data, "f" * 64)
    with pytest.raises(ValueError, match="invalid"):
        decode_manifest({**data, "tasks": [{"dataset": f"t{i}"} for i in range(40)]}, None)
    with pytest.raises(ValueError, match="outside the size caps"):
        decode_manifest({**data, "tasks": [{"dataset": "chain_sum", "config": {"max_digits": 99}}]}, None)
    assert decode_manifest(data, manifest_digest(good)) == good


# --- joining later, and a manifest that changes between connections ------------------------------------------

def _connect(c: SwarmClient, timeout: float = 20) -> None:
    """Retry as the node does (the client's own backoff) until its relay answers."""
    deadline = time.monotonic() + timeout
    while not c.ensure_connected():
        assert c.refused is None and time.monotonic() < deadline, c.refused or "the relay never answered"
        time.sleep(0.2)


def test_a_node_that_started_alone_decides_on_the_manifest_once_its_relay_answers(tmp_path):
    relay = RelayProcess(tmp_path / "relay", "--swarms", str(_file(tmp_path, GOOD)))  # not up yet
    seen: list[object] = []
    events = EventLog()
    events.add(seen.append)
    c = SwarmClient(relay.url, "arithmetic", A, "smollm2-135m", None, on_status=events.status,
                    on_manifest=events.emit, on_link=events.emit, timeout_s=5)
    pinned = SwarmClient(relay.url, "arithmetic", B, "smollm2-135m", None, on_status=events.status,
                         on_manifest=events.emit, on_link=events.emit, timeout_s=5)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    cfg, mix = join(c, _cfg(relay), tmp_path / "a", events)
    assert mix is None and cfg.completions == 8 and not pending(c)  # alone, on its own mix
    assert join(pinned, _cfg(relay, manifest_digest="0" * 64), tmp_path / "b", events)[1] is None
    assert [e.state for e in seen if isinstance(e, ev.Relay)] == ["unreachable", "unreachable"]
    relay.start()
    try:
        _connect(c)
        assert pending(c)  # the runner's round boundary (Node._follow_swarm) decides now
        cfg, mix = follow(c, _cfg(relay), tmp_path / "a", events)
        m = _manifest(tmp_path)
        assert mix is not None and mix.digest == manifest_digest(m) and not pending(c)
        assert cfg.completions == 4 and cfg.tasks == ["basic_arithmetic", "chain_sum"]
        (adopted,) = [e for e in seen if isinstance(e, ev.SwarmManifest)]
        assert adopted.state == "adopted" and adopted.mix == ["basic_arithmetic x2 max_digits 1..2", "chain_sum"]
        assert json.loads((tmp_path / "a" / RECORD).read_text())["digest"] == manifest_digest(m)
        # A node whose invite pins another digest refuses it then, says why, and stays alone.
        _connect(pinned)
        cfg, mix = follow(pinned, _cfg(relay, manifest_digest="0" * 64), tmp_path / "b", events)
        assert mix is None and cfg.completions == 8 and not pending(pinned) and not pinned.connected
        refused = [e for e in seen if isinstance(e, ev.SwarmManifest) and e.state == "refused"]
        assert len(refused) == 1 and "the invite pins 000000000000" in refused[0].reason
        assert not (tmp_path / "b" / RECORD).exists()
    finally:
        c.close()
        relay.stop()


def test_a_manifest_changed_between_connections_is_reported_not_followed(tmp_path):
    relay = RelayProcess(tmp_path / "relay", "--swarms", str(_file(tmp_path, GOOD))).start()
    seen: list[object] = []
    events = EventLog()
    events.add(seen.append)
    c = SwarmClient(relay.url, "arithmetic", A, "smollm2-135m", None, on_status=events.status,
                    on_manifest=events.emit, timeout_s=5)
    try:
        cfg, mix = join(c, _cfg(relay), tmp_path, events)
        assert mix is not None and cfg.max_tokens == 48
        # The operator edits the file and restarts the relay (same port, same data) while the node trains.
        relay.stop()
        changed = tmp_path / "changed"
        changed.mkdir()
        text = GOOD.replace("max_tokens = 48", "max_tokens = 64", 1).replace(
            "\n[swarms.secret]", "\n[swarms.arithmetic.tasks.gcd]\n\n[swarms.secret]")
        port = relay.port
        relay = RelayProcess(tmp_path / "relay", "--swarms", str(_file(changed, text)))
        relay.port = port
        relay.start()
        assert c.stats() is None and not c.connected  # the old connection is gone: dropped, retried later
        _connect(c)
        changes = [e for e in seen if isinstance(e, ev.SwarmManifest) and e.state == "changed"]
        assert len(changes) == 1 and changes[0].joined_digest == mix.digest
        assert changes[0].changes == ["max_tokens", "task gcd added"]
        assert c.joined == mix.manifest and not pending(c)  # the node keeps the one it joined with
        c.close()
        _connect(c)  # told once, not at every reconnection
        assert len([e for e in seen if isinstance(e, ev.SwarmManifest) and e.state == "changed"]) == 1
    finally:
        c.close()
        relay.stop()


def test_the_start_line_names_the_manifest_followed_instead_of_the_preset():
    lines = io.StringIO()
    show = terminal_printer(lines)
    start = dict(node_id="n", node_name="N", model="smollm2-135m", model_path="m.gguf", round_start=0, round_end=2,
                 threads=1, settings={"preset": "easy", "swarm": "sums", "completions": 4})
    show(ev.Start(**start, mix=["basic_arithmetic max_digits 1..2"], manifest="ab" * 32))
    show(ev.Start(**start, mix=["basic_arithmetic"]))
    followed, alone = lines.getvalue().splitlines()
    assert "swarm sums's manifest abababababab: basic_arithmetic max_digits 1..2" in followed
    assert "preset" not in followed and "preset easy" in alone
