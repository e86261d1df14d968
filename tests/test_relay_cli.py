"""``sapo-relay`` as a user runs it: clear one-line errors, clean shutdown on SIGTERM."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from wire import protocol as p
from relay.cli import build_parser, config_from_args, main
from relay.server import STATS_FILE
from tools.relay_loadgen import SimNode, spawn_relay, synthetic_group


def relay_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay", *args], capture_output=True, text=True, timeout=30, check=False
    )


def one_clear_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("port", ["70000", "http", "-1"])
def test_bad_port(port: str, tmp_path: Path) -> None:
    done = relay_cli("--port", port, "--data-dir", str(tmp_path))
    assert done.returncode == 2
    assert "port" in one_clear_line(done.stderr)


@pytest.mark.parametrize("flag, value", [("--hello-timeout-s", "inf"), ("--rate", "inf"), ("--pool-max-age-s", "inf"),
                                         ("--rate", "nan"), ("--burst", "0"), ("--groups-per-minute", "-3")])
def test_a_limit_is_positive_and_finite(flag: str, value: str, tmp_path: Path) -> None:
    # inf passed "> 0" and switched the limit off: a client that never says hello held its slot for good
    done = relay_cli("--port", "0", "--data-dir", str(tmp_path), flag, value)
    assert done.returncode == 2
    assert f"argument {flag}: must be a positive finite number, not {value}" in one_clear_line(done.stderr)


@pytest.mark.parametrize("args, words", [
    (["--host", ""], "argument --host: must name an interface"),  # asyncio would listen on every interface
    (["--data-dir", ""], "argument --data-dir: must name a directory"),  # it would be the working directory
    (["--max-peers", "1.5"], "argument --max-peers: expected a whole number, not '1.5'"),
])
def test_an_empty_place_or_a_fraction_is_one_line_before_listening(args: list[str], words: str, tmp_path: Path) -> None:
    done = relay_cli("--port", "0", "--data-dir", str(tmp_path), *args)
    assert done.returncode == 2
    assert words in one_clear_line(done.stderr)


def test_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = relay_cli("--port", str(port), "--data-dir", str(tmp_path))
    assert done.returncode == 1
    assert "address already in use" in one_clear_line(done.stderr).lower()


def test_unusable_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["--port", "0", "--data-dir", str(blocker / "sub")]) == 1
    assert "cannot use data dir" in one_clear_line(capsys.readouterr().err)


def test_allow_keys_file(tmp_path: Path) -> None:
    from wire.identity import Identity

    a, b = Identity.generate(), Identity.generate()
    good = tmp_path / "keys.txt"
    good.write_text(f"# friends\n{a.node_id}\n{b.public_key.hex()}  # by public key\n\n")
    args = build_parser().parse_args(["--allow-keys", str(good), "--data-dir", str(tmp_path)])
    assert config_from_args(args).allowed_keys == frozenset({a.node_id, b.node_id})
    bad = tmp_path / "bad.txt"
    bad.write_text(f"{a.node_id}\nnot-a-key\n")
    for path, words in ((bad, "bad.txt:2"), (tmp_path / "missing.txt", "cannot read")):
        done = relay_cli("--allow-keys", str(path), "--data-dir", str(tmp_path), "--port", "0")
        assert done.returncode == 2
        assert words in one_clear_line(done.stderr)


def test_sigterm_flushes_stats(tmp_path: Path) -> None:
    relay = spawn_relay([], tmp_path)
    node = SimNode(relay.url, swarm="s")

    async def contribute() -> None:
        assert isinstance(await node.connect(), p.Welcome)
        group = synthetic_group(__import__("random").Random(0))
        assert isinstance(await node.request(node.publish_message(group)), p.Ack)
        await node.close()

    try:
        asyncio.run(contribute())
    finally:
        assert relay.stop() == 0  # SIGTERM: clean exit
    assert "Traceback" not in relay.log_path.read_text()
    with sqlite3.connect(tmp_path / "data" / STATS_FILE) as db:
        row = db.execute("SELECT groups_shared FROM nodes WHERE node_id = ?", (node.node_id,)).fetchone()
    assert row == (1,)


@pytest.mark.parametrize("url", ["http://redis:6379", "redis://", "redis://h:99999/0", "redis://h:6379/x"])
def test_bad_redis_url(url: str, tmp_path: Path) -> None:
    done = relay_cli("--port", "0", "--data-dir", str(tmp_path), "--redis", url)
    assert done.returncode == 2
    assert "--redis" in one_clear_line(done.stderr)


@pytest.mark.parametrize("args, says", [(["--seed", "x"], "--seed"),
                                        (["--seed", "1", "--redis", "redis://127.0.0.1:6379/0"], "--seed")])
def test_a_seed_is_a_whole_number_for_the_in_memory_pool(args: list[str], says: str, tmp_path: Path) -> None:
    done = relay_cli("--port", "0", "--data-dir", str(tmp_path), *args)
    assert done.returncode == 2
    assert says in one_clear_line(done.stderr)


def test_unreachable_redis_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = relay_cli("--port", "0", "--data-dir", str(tmp_path), "--redis", f"redis://127.0.0.1:{port}/0")
    assert done.returncode == 1
    assert "cannot reach Redis" in one_clear_line(done.stderr)


SWARMS = "[swarms.sums]\ncompletions = 4\nmax_tokens = 24\n[swarms.sums.tasks.chain_sum]\n"


def test_keygen_makes_a_private_key_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from wire.identity import Identity

    key = tmp_path / "manifest.key"
    assert main(["keygen", str(key)]) == 0
    out = capsys.readouterr().out
    assert (key.stat().st_mode & 0o777) == 0o600
    signer = Identity.from_pem(key.read_bytes()).public_key.hex()
    assert f"signer {signer}" in out.splitlines()  # what invites pin and GET /swarms lists
    before = key.read_bytes()
    assert main(["keygen", str(key)]) == 2  # never over a key nodes may pin
    assert "exists: not overwritten" in one_clear_line(capsys.readouterr().err)
    assert key.read_bytes() == before
    assert main(["keygen", str(tmp_path / "no-such-dir" / "k")]) == 2
    assert "cannot create" in one_clear_line(capsys.readouterr().err)


def test_manifest_key_problems_are_one_line_before_listening(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    swarms = tmp_path / "swarms.toml"
    swarms.write_text(SWARMS)
    not_pem = tmp_path / "notes.txt"
    not_pem.write_text("hello\n")
    ec_key = tmp_path / "tls.key"  # a TLS key given by mistake
    ec_key.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    cases = [
        (["--swarms", str(swarms), "--manifest-key", str(tmp_path / "missing.key")], "cannot read --manifest-key"),
        (["--swarms", str(swarms), "--manifest-key", str(not_pem)], "not a PEM private key"),
        (["--swarms", str(swarms), "--manifest-key", str(ec_key)], "not an Ed25519 private key"),
        (["--manifest-key", str(ec_key)], "give that too"),  # nothing to sign without --swarms
    ]
    for args, words in cases:
        assert main(["--port", "0", "--data-dir", str(tmp_path / "d"), *args]) == 2, args
        assert words in one_clear_line(capsys.readouterr().err)
    assert main(["invite", "sums", "--swarms", str(swarms), "--url", "ws://h:1", "--manifest-key", str(not_pem)]) == 2
    assert "not a PEM private key" in one_clear_line(capsys.readouterr().err)


def test_a_readable_manifest_key_is_used_with_a_warning(tmp_path: Path) -> None:
    from relay.manifest_key import read_manifest_key
    from wire.identity import Identity

    key = tmp_path / "k.pem"
    key.write_bytes(Identity.from_seed(b"\x01" * 32).to_pem())
    key.chmod(0o644)  # as container secrets are often mounted
    identity, notes = read_manifest_key(key)
    assert identity.public_key == Identity.from_seed(b"\x01" * 32).public_key
    assert len(notes) == 1 and "readable by other users" in notes[0]
    key.chmod(0o600)
    assert read_manifest_key(key)[1] == []
