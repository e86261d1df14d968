"""A test's child processes (a relay, a redis-server, a browser): ending them politely first, then for sure;
and what to do when the program is not installed."""

from __future__ import annotations

import os
import subprocess
from typing import NoReturn

import pytest


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


def missing(why: str, required_by: str) -> NoReturn:
    """A system program a test starts is not installed: skip, saying why, unless the environment
    variable ``required_by`` is 1 (CI sets it), where a skip would hide an untested path: then fail."""
    if os.environ.get(required_by) == "1":
        pytest.fail(f"{why}, and {required_by}=1")
    pytest.skip(why)
