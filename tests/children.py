"""Ending a test's child process (a relay, a redis-server): politely first, then for sure."""

from __future__ import annotations

import subprocess


def kill(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL: what a crash looks like to everyone else."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(10)


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, and SIGKILL if it has not ended within 10 s."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            kill(proc)
