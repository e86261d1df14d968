"""The lab's relay: a real ``sapo-relay`` started as a child process on 127.0.0.1.

A child process rather than a relay on a thread of our own: the engine never imports the relay
(docs/ARCHITECTURE.md), and the agents reach it through the same websocket protocol a
volunteer's node uses on a public relay. It listens on a port the OS chooses (``--port 0``);
we learn which from its "listening on" log line. On Linux the child is asked to end with its
parent (``PR_SET_PDEATHSIG``), so a killed experiment leaves no relay behind.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from engine.errors import SapoError

LISTENING = re.compile(rb"listening on ws://127\.0\.0\.1:(\d+)")
START_TIMEOUT_S = 30.0


# Set in the child before it becomes the relay (exec keeps it), not in a preexec_fn, which is unsafe in a
# process with threads (ours has torch's and the sandbox's). 1 = PR_SET_PDEATHSIG.
_LINUX_START = "import ctypes, os, sys; ctypes.CDLL(None).prctl(1, {sig}); os.execv(sys.executable, sys.argv[1:])"


class RelayChild:
    """``python -m relay`` on 127.0.0.1 with its data (stats database, log) in ``data_dir``."""

    def __init__(self, data_dir: Path, groups_per_minute: int = 600, seed: int | None = 0) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = data_dir / "relay.log"
        # Agents publish a round's groups in one burst; the author rate limit is for the open internet.
        cmd = [sys.executable, "-m", "relay", "--host", "127.0.0.1", "--port", "0", "--data-dir", str(data_dir),
               "--groups-per-minute", str(groups_per_minute), "--log-level", "INFO"]
        if seed is not None:  # each swarm (an experiment's cell) draws its own stream: a rerun gets the same groups
            cmd += ["--seed", str(seed)]
        if sys.platform == "linux":
            cmd = [sys.executable, "-c", _LINUX_START.format(sig=int(signal.SIGTERM)), *cmd]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        self.url = f"ws://127.0.0.1:{self._wait_for_port()}"

    def _wait_for_port(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            found = LISTENING.search(self.log_path.read_bytes())
            if found:
                return int(found.group(1))
            if self.proc.poll() is not None:
                raise SapoError(f"the experiment's relay exited with {self.proc.returncode}: {self._last_line()}")
            time.sleep(0.05)
        self.close()
        raise SapoError(f"the experiment's relay did not start within {START_TIMEOUT_S:.0f} s: {self._last_line()}")

    def _last_line(self) -> str:
        lines = self.log_path.read_bytes().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else "(no output)"

    def close(self) -> None:
        """SIGTERM (the relay saves its stats and stops), SIGKILL after 10 s. Safe to call twice."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
