"""A real relay process on 127.0.0.1 for engine-side tests: start, kill, restart on the same port and data."""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import children
from tools.relay_loadgen import free_port


class RelayProcess:
    def __init__(self, data_dir: Path, *args: str, tls_ca: Path | None = None) -> None:
        """``tls_ca``: the relay serves TLS (args carry --tls-cert/--tls-key) with a certificate this CA signed."""
        self.data_dir = data_dir
        self.args = args
        self.tls = ssl.create_default_context(cafile=tls_ca) if tls_ca is not None else None
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'wss' if self.tls else 'ws'}://127.0.0.1:{self.port}"

    @property
    def http(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 5) -> str:
        with urllib.request.urlopen(self.http + path, timeout=timeout, context=self.tls) as resp:
            return str(resp.read().decode())

    def start(self, timeout: float = 30) -> "RelayProcess":
        self.proc = subprocess.Popen([sys.executable, "-m", "relay", "--host", "127.0.0.1", "--port", str(self.port),
                                      "--data-dir", str(self.data_dir), "--log-level", "WARNING", *self.args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "relay exited"
            try:
                self.get("/healthz", timeout=1)
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("relay did not come up")

    def kill(self) -> None:
        children.kill(self.proc)

    def stop(self) -> None:
        children.stop(self.proc)
