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


def test_unreachable_redis_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = relay_cli("--port", "0", "--data-dir", str(tmp_path), "--redis", f"redis://127.0.0.1:{port}/0")
    assert done.returncode == 1
    assert "cannot reach Redis" in one_clear_line(done.stderr)
