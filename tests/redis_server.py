"""A real ``redis-server`` on 127.0.0.1 for tests: a free port, a temp dir, start/stop/kill/restart.

Tests that need it skip (with the reason shown) only where redis-server is not installed, and fail
instead when ``SAPO_REQUIRE_REDIS=1`` (CI), so a missing package cannot pass silently.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import children
from tools.relay_loadgen import free_port


def require_redis_server() -> str:
    path = shutil.which("redis-server")
    if path is None:
        children.missing("redis-server is not installed (Debian: apt install redis-server)", "SAPO_REQUIRE_REDIS")
    return path


class RedisServer:
    def __init__(self, workdir: Path, *, aof: bool = False) -> None:
        self.binary = require_redis_server()
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.aof = aof
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        persistence = (["--appendonly", "yes", "--appendfsync", "always"] if self.aof
                       else ["--appendonly", "no"])
        self.proc = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
             "--save", "", *persistence, "--protected-mode", "yes", "--loglevel", "warning"],
            stdout=(self.dir / "redis.log").open("ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"redis-server exited: {(self.dir / 'redis.log').read_text()[-500:]}"
            if self.ping():
                return self
            time.sleep(0.05)
        raise RuntimeError("redis-server did not come up")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        children.kill(self.proc)

    def stop(self) -> None:
        children.stop(self.proc)
