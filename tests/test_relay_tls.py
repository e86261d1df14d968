"""TLS end to end: a real relay serving wss:// with a certificate from a CA made here, and the real node client.

The node trusts the private CA through ``relay_ca_file``; without it the node stops with a clear line;
plain ws:// to the TLS port fails without harm; a bad certificate or key is a one-line exit 2.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, TypeVar

import pytest

from engine.config import build_config
from engine.errors import SapoError
from engine.sharing.swarm_client import SwarmClient
from engine.tasks.questions import QuestionStream, build_mix
from wire.identity import Identity
from wire.protocol import Group, group_digest

from relay_process import RelayProcess
from tls_certs import PKI, make_pki

T = TypeVar("T")
A, B = Identity.from_seed(b"\x11" * 32), Identity.from_seed(b"\x12" * 32)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def relay(pki: PKI, tmp_path_factory: pytest.TempPathFactory):
    r = RelayProcess(tmp_path_factory.mktemp("relay"), "--tls-cert", str(pki.cert), "--tls-key", str(pki.key),
                     tls_ca=pki.ca).start()
    yield r
    r.stop()


def _groups(node: str, n: int) -> list[Group]:
    qs = QuestionStream(build_mix("easy", tasks=["basic_arithmetic"]), node, 0, []).draw(n)
    return [Group(spec=q.spec, question=q.question, answer=q.answer,
                  completions=[f"<answer>{q.answer}</answer>", "<answer>0</answer>"], rewards=[1.0, 0.0],
                  model="m", round=1) for q in qs]


def _client(url: str, me: Identity, ca: Path | None, log: list[str] | None = None) -> SwarmClient:
    return SwarmClient(url, "tls", me, "smollm2-135m", None, on_status=(log if log is not None else []).append,
                       timeout_s=15, ca_file=str(ca) if ca else None)  # generous: a loaded CI box


def _once_linked(client: SwarmClient, request: Callable[[], T], tries: int = 4) -> T:
    """The request's answer, asked again after the client's own backoff when its link failed.

    CI runs with both cores busy twice lost this link once (a handshake the relay closed before answering, "did
    not receive a valid HTTP response"; a sample that came back empty); the node itself retries next round.
    What this file tests is TLS, so a dropped link is retried here the way the node would, and a link that
    never comes up still fails the test.
    """
    answer = request()
    for _ in range(tries - 1):
        if client.connected:
            return answer
        time.sleep(max(0.0, client._next_try - time.monotonic()) + 0.1)
        answer = request()
    return answer


def test_node_publishes_and_samples_over_wss(relay: RelayProcess, pki: PKI) -> None:
    log_a: list[str] = []
    log_b: list[str] = []
    a = _client(relay.url, A, pki.ca, log_a)
    b = _client(f"wss://localhost:{relay.port}", B, pki.ca, log_b)  # the certificate names both
    groups = _groups(A.node_id, 2)
    ack = _once_linked(a, lambda: a.publish(groups))
    assert ack is not None and ack.accepted == 2, log_a
    got = _once_linked(b, lambda: b.sample(4, None))
    assert len(got) == 2, (b.connected, log_b, log_a)
    assert all(b.screen(g) is None for g in got)
    assert (b.report(1, [group_digest(g.group) for g in got]) or None) is not None
    stats = a.stats()
    assert stats is not None and stats.you.groups_shared == 2 and stats.you.groups_adopted == 2
    a.close(), b.close()
    # The plain-HTTP endpoints are served over the same TLS port.
    health = json.loads(relay.get("/healthz"))
    assert health["status"] == "ok" and health["pool_groups"] >= 2
    assert "sapo_relay_groups_accepted_total" in relay.get("/metrics")


def test_node_without_the_ca_is_refused_with_a_clear_error(relay: RelayProcess) -> None:
    node = _client(relay.url, A, None)  # the system's CAs do not include ours
    with pytest.raises(SapoError, match="does not trust") as err:
        node.ensure_connected()
    assert "relay_ca_file" in str(err.value) and "\n" not in str(err.value)
    # Nor does any other TLS client get through without it.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(relay.http + "/healthz", timeout=5, context=ssl.create_default_context())


def test_plain_ws_to_the_tls_port_fails_cleanly(relay: RelayProcess, pki: PKI) -> None:
    log: list[str] = []
    plain = _client(f"ws://127.0.0.1:{relay.port}", A, None, log)
    assert plain.ensure_connected() is False and not plain.connected  # no exception, no hang: training goes on
    assert log and "unreachable" in log[-1] and "retrying" in log[-1] and "use wss://" in log[-1]
    with pytest.raises(OSError):  # plain http, likewise
        urllib.request.urlopen(f"http://127.0.0.1:{relay.port}/healthz", timeout=5)
    # The relay shrugged it off: a proper client still gets in.
    good_log: list[str] = []
    good = _client(relay.url, B, pki.ca, good_log)
    assert _once_linked(good, good.stats) is not None, good_log
    good.close()


def test_the_ca_setting(pki: PKI, tmp_path: Path) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text(f'relay = "wss://relay.example:443"\nrelay_ca_file = "{pki.ca}"\n')
    from engine.config import load_toml

    assert build_config(load_toml(toml), {}).relay_ca_file == str(pki.ca)
    # A CA file beside a ws:// relay (the app's local swarm, say) is not an error: unused, and said so.
    assert build_config({"relay": "ws://127.0.0.1:8765", "relay_ca_file": str(pki.ca)}, {}).relay_ca_file
    with pytest.raises(SapoError, match="CA file not found"):
        _client("wss://127.0.0.1:1", A, tmp_path / "missing.pem")
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    with pytest.raises(SapoError, match="not a PEM CA certificate"):
        _client("wss://127.0.0.1:1", A, tmp_path / "junk.pem")
    log: list[str] = []
    assert _client("ws://127.0.0.1:1", A, pki.ca, log)._tls is None
    assert log == [f"relay CA file {pki.ca} not used: relay ws://127.0.0.1:1 is ws:// (no TLS)"]


def test_engine_flag_for_the_ca_file(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "engine", "run", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--relay-ca-file" in done.stdout
    # A missing CA file stops `sapo-engine run` at once, before any model is loaded, with one line.
    done = subprocess.run([sys.executable, "-m", "engine", "run", "--data-dir", str(tmp_path / "node"),
                           "--relay", "wss://127.0.0.1:9", "--relay-ca-file", str(tmp_path / "missing.pem")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"sapo-engine: error: relay CA file not found: {tmp_path / 'missing.pem'}"]


def _relay_cli(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "relay", "--port", "0", "--data-dir", str(tmp / "data"), *args],
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("case, expect", [
    ("missing-cert", "cannot read --tls-cert"),
    ("not-pem", "is not a PEM certificate"),
    ("key-not-pem", "is not a PEM private key"),
    ("mismatched", "does not belong to the certificate"),
    ("encrypted", "is encrypted"),
    ("expired", "expired on"),
    ("cert-only", "needs both a certificate"),
])
def test_bad_certificate_or_key_is_one_line_exit_2(case: str, expect: str, pki: PKI, tmp_path: Path) -> None:
    folder = pki.ca.parent
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN NOTHING-----\n")
    cert, key = {
        "missing-cert": (tmp_path / "nope.pem", pki.key),
        "not-pem": (junk, pki.key),
        "key-not-pem": (pki.cert, junk),
        "mismatched": (pki.cert, folder / "other-key.pem"),
        "encrypted": (pki.cert, folder / "encrypted-key.pem"),
        "expired": (folder / "expired.pem", pki.key),
        "cert-only": (pki.cert, None),
    }[case]
    args = ["--tls-cert", str(cert)] + (["--tls-key", str(key)] if key else [])
    done = _relay_cli(*args, tmp=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert expect in lines[0] and lines[0].startswith("sapo-relay: ")
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())  # nothing started


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl command not installed")
def test_openssl_sees_the_served_certificate(relay: RelayProcess, pki: PKI) -> None:
    """An independent TLS client (OpenSSL's own) verifies the chain the relay serves."""
    done = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{relay.port}", "-CAfile", str(pki.ca),
                           "-verify_return_error", "-brief"], input="", capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    assert "Verification: OK" in done.stderr


@pytest.mark.slow
def test_a_real_engine_trains_over_wss(relay: RelayProcess, pki: PKI, tmp_path: Path, model_cache: Path) -> None:
    """`sapo-engine run --relay wss://... --relay-ca-file CA`: the runner hands the CA to its client; rounds connected."""
    import os

    events = tmp_path / "events.jsonl"
    small = ["--model", "smollm2-135m", "--tasks", "basic_arithmetic", "--completions", "4", "--max-tokens", "24",
             "--eval-every", "0", "--threads", "1", "--quiet", "--local", "2", "--external", "2", "--rounds", "2"]
    done = subprocess.run([sys.executable, "-m", "engine", "run", *small, "--swarm", "tls-e2e", "--relay", relay.url,
                           "--relay-ca-file", str(pki.ca), "--data-dir", str(tmp_path / "node"), "--events", str(events)],
                          capture_output=True, text=True, timeout=900, env={**os.environ, "SAPO_CACHE_DIR": str(model_cache)})
    assert done.returncode == 0, done.stderr[-2000:]
    rounds = [e for e in map(json.loads, events.read_text().splitlines()) if e["type"] == "round"]
    assert [e["round"] for e in rounds] == [1, 2] and all(e["relay_connected"] for e in rounds)
    assert rounds[-1]["shared_total"] > 0  # its groups reached the relay over TLS
