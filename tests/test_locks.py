"""engine/locks.py: one holder at a time, across processes; the OS frees it when the holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from engine.locks import holder, try_lock

HOLD = "import sys, time\nfrom pathlib import Path\nfrom engine.locks import try_lock\n" \
       "fh = try_lock(Path(sys.argv[1]))\nprint('held' if fh else 'refused', flush=True)\ntime.sleep(600)\n"


def test_one_holder_at_a_time_and_a_killed_holder_frees_it(tmp_path: Path):
    path = tmp_path / "node.lock"
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        assert try_lock(path) is None
        assert holder(path) == child.pid
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    deadline = time.monotonic() + 10
    fh = try_lock(path)
    while fh is None and time.monotonic() < deadline:  # the kernel drops a dead process's lock at once; be patient
        time.sleep(0.05)
        fh = try_lock(path)
    assert fh is not None
    assert holder(path) == os.getpid()
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "refused"  # ours now
    finally:
        child.kill()
        child.wait(10)
    fh.close()
    assert try_lock(path) is not None  # closing the file releases it
