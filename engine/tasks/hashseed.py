"""One string-hash seed for every process that makes questions.

reasoning-gym's ``polynomial_multiplication`` words a question through sympy, whose set order follows
Python's per-process string hashing (``PYTHONHASHSEED``, random by default): the same task spec gives
another question text in another process, so a receiver could never regenerate a sender's question and
refused every such group (``question_mismatch``). Python fixes the hash seed only at start, so the
engine's command line restarts itself once with ``PYTHONHASHSEED=0`` when it was not set that way, and
the scoring workers (engine/sandbox/workers.py) are started with it. Hash randomization guards dict-flooding
attacks on servers; the engine keeps no hash table keyed by a peer's strings whose size a peer controls
(every peer input is bounded before it is parsed), so a fixed seed costs nothing here.
"""

from __future__ import annotations

import os
import subprocess
import sys

SEED = "0"


def fixed() -> bool:
    return os.environ.get("PYTHONHASHSEED") == SEED


def env(base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for a child process that makes or checks questions."""
    return {**(os.environ if base is None else base), "PYTHONHASHSEED": SEED}


def restart_with_fixed_seed(argv: list[str]) -> None:
    """Run this command again with the fixed seed and exit with its status (no return), unless it already has it.

    POSIX replaces the process (same pid, so a parent such as the GUI keeps its child); Windows has no
    exec that keeps the pid, so it runs the command as a child and passes its exit status on.
    """
    if fixed():
        return
    cmd = [sys.executable, "-m", "engine", *argv]
    if os.name == "posix":
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, cmd, env())
    sys.exit(subprocess.call(cmd, env=env()))
