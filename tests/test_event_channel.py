"""The engine's stdout carries events and nothing else, whatever a library prints there.

The cause found: reasoning-gym's bf task prints "." (its bfit compiler's optimizer) for every question
it makes, so `--events -` began with ".{"type":...}" and the GUI lost the start event.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wire import events as ev

ROOT = Path(__file__).resolve().parent.parent


def test_claimed_stdout_keeps_python_and_c_level_writes_out_of_the_channel():
    code = (
        "import ctypes, os, sys\n"
        "from engine.run.event_log import claim_stdout\n"
        "print('before', flush=True)\n"  # before the claim: stdout as usual
        "channel = claim_stdout()\n"
        "print('.', end='', flush=True)\n"  # what reasoning-gym does
        "os.write(1, b'raw')\n"  # what a C library does
        "ctypes.CDLL(None).puts(b'libc')\n"
        "channel.write('{\"type\": \"x\"}\\n')\n"
        "channel.flush()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == 'before\n{"type": "x"}\n'
    assert ".raw" in done.stderr and "libc" in done.stderr  # moved, not lost


@pytest.mark.slow
def test_a_real_round_on_the_task_that_prints_writes_only_events_to_stdout(tmp_path):
    """A model load and a round of bf (whose question maker prints): every stdout line is a typed event."""
    cmd = [sys.executable, "-m", "engine", "run", "--model", "smollm2-135m", "--offline", "--rounds", "1",
           "--tasks", "bf", "--local", "1", "--external", "0", "--completions", "2", "--max-tokens", "8",
           "--eval-every", "0", "--threads", "1", "--data-dir", str(tmp_path / "data"), "--events", "-", "--quiet"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    types = []
    for line in lines:
        typed = ev.decode_event(line)
        assert typed is not None, f"not an event on stdout: {line[:120]!r}"
        types.append(json.loads(line)["type"])
    assert types[0] in ("status", "start") and "start" in types and "round" in types and types[-1] == "stop"
    assert "." in done.stderr  # the library did print: it went to stderr
