"""The real engine keeps its history across a restart: a second ``sapo-engine run`` on the same data dir
says the first run's round in its ``history`` event, right after ``start`` (what the app rebuilds from)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wire import events as ev

pytestmark = pytest.mark.slow

TINY = ["--model", "smollm2-135m", "--offline", "--tasks", "basic_arithmetic", "--local", "1", "--external", "0",
        "--completions", "2", "--max-tokens", "8", "--eval-every", "0", "--threads", "1", "--events", "-", "--quiet"]


def _run(data: Path, rounds: int) -> list[ev.Event]:
    cmd = [sys.executable, "-m", "engine", "run", *TINY, "--rounds", str(rounds), "--data-dir", str(data)]
    done = subprocess.run(cmd, cwd=data.parent, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return [e for line in done.stdout.splitlines() if (e := ev.decode_event(line)) is not None]


def test_a_resumed_run_says_the_rounds_before_it(tmp_path):
    data = tmp_path / "data"
    first = _run(data, 1)
    types = [type(e) for e in first]
    assert types[types.index(ev.Start) + 1] is ev.History
    assert next(e for e in first if isinstance(e, ev.History)).events == []  # a fresh data dir: no past
    round_1 = next(e for e in first if isinstance(e, ev.Round))

    second = _run(data, 2)
    types = [type(e) for e in second]
    history = second[types.index(ev.Start) + 1]
    assert isinstance(history, ev.History)
    assert [e.round for e in history.events] == [1] and history.events[0].reward_mean == round_1.reward_mean
    kept = [json.loads(line)["round"] for line in (data / "checkpoints" / "smollm2-135m" / "events.jsonl").read_text().splitlines()]
    assert kept == [1, 2]  # the file grows with the run
