"""The command channel into a running node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from engine.run.control import Control
from engine.run.priority import LOW_NICE
from tests.threads import THREADS, thread_nices
from wire import events as ev

pytestmark = pytest.mark.slow  # the real model: started first when the suite runs on several workers


def _recorder():
    said: list = []
    return said, Control(said.append)


def test_commands_flip_the_switches_and_bad_lines_are_only_warnings():
    said, c = _recorder()
    c.apply('{"cmd": "pause"}')
    assert c.paused and said == []  # no state event until the loop really pauses
    c.apply('{"cmd": "resume"}')
    assert not c.paused
    c.apply('{"cmd": "set_threads", "threads": 3}')
    assert c.threads == 3
    for junk in ("not json", '{"cmd": 5}', '{"cmd": "explode"}', '{"cmd": "set_threads", "threads": 0}', '{"x": 1}',
                 '{"cmd": "pause", "extra": 1}'):
        c.apply(junk)
    assert [type(e) for e in said] == [ev.Status] + [ev.Warning] * 6
    c.apply('{"cmd": "pause"}')
    c.apply('{"cmd": "stop"}')
    assert c.stop_requested
    c.wait_if_paused()  # returns at once: stopping wakes a paused node
    assert said[-1] == ev.StateChanged(state="stopping", time=said[-1].time)
    n = len(said)
    c.apply('{"cmd": "stop"}')  # end of input after a stop command: nothing new to say
    assert len(said) == n


def test_pause_point_blocks_and_says_so_from_the_loop_thread():
    said, c = _recorder()
    c.apply('{"cmd": "pause"}')
    loop = threading.Thread(target=c.wait_if_paused)
    loop.start()
    deadline = time.monotonic() + 5
    while not said and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [e.state for e in said] == ["paused"] and loop.is_alive()
    c.apply('{"cmd": "resume"}')
    loop.join(5)
    assert not loop.is_alive()
    assert [e.state for e in said] == ["paused", "running"]


def test_finish_pauses_at_the_end_of_the_round_and_resume_cancels_it():
    said, c = _recorder()
    c.apply('{"cmd": "finish"}')
    assert [e.state for e in said] == ["finishing"]
    c.wait_if_paused()  # mid-round pause points do not stop a finishing round
    c.apply('{"cmd": "resume"}')  # changed my mind: keep going
    c.round_done()
    assert [e.state for e in said] == ["finishing", "running"]
    c.apply('{"cmd": "finish"}')
    loop = threading.Thread(target=c.round_done)
    loop.start()
    deadline = time.monotonic() + 5
    while said[-1].state != "paused" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert said[-1].state == "paused" and loop.is_alive()
    c.apply('{"cmd": "resume"}')
    loop.join(5)
    assert [e.state for e in said][-3:] == ["finishing", "paused", "running"]


def test_pause_resume_stop_a_real_node(tmp_path, model_cache):
    data = tmp_path / "data"
    data.mkdir()
    (data / "node.json").write_text(json.dumps({"node_id": "c0" * 16}))
    events = tmp_path / "events.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "run", "--model", "smollm2-135m", "--offline", "--tasks", "basic_arithmetic",
         "--local", "2", "--external", "0", "--completions", "2", "--max-tokens", "16", "--eval-every", "0",
         "--threads", str(THREADS), "--quiet", "--control", "stdin", "--data-dir", str(data), "--events", str(events)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "SAPO_CACHE_DIR": str(model_cache)})

    def seen() -> list[dict]:
        return [json.loads(x) for x in events.read_text().splitlines()] if events.exists() else []

    def wait_for(pred, timeout=300):
        deadline = time.monotonic() + timeout
        while not pred(seen()):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.1)

    try:
        wait_for(lambda ev: any(e["type"] == "round" for e in ev))
        proc.stdin.write('{"cmd": "pause"}\n')
        proc.stdin.flush()
        wait_for(lambda ev: any(e.get("state") == "paused" for e in ev))
        time.sleep(1.0)  # the round in flight, if any, may finish...
        n = len([e for e in seen() if e["type"] == "round"])
        time.sleep(4.0)  # ... but no new round starts while paused
        assert len([e for e in seen() if e["type"] == "round"]) <= n
        # low priority by default: every thread, llama.cpp's and torch's workers and the scoring workers included
        nices = thread_nices(proc.pid)
        assert len(nices) > 3 and set(nices.values()) == {LOW_NICE}, nices
        proc.stdin.write('{"cmd": "set_threads", "threads": 1}\n{"cmd": "resume"}\n')
        proc.stdin.flush()
        wait_for(lambda ev: len([e for e in ev if e["type"] == "round"]) > n)
        # finish: the round in flight completes, then the node pauses and says so
        proc.stdin.write('{"cmd": "finish"}\n')
        proc.stdin.flush()
        wait_for(lambda ev: [e.get("state") for e in ev if e["type"] == "state"][-1:] == ["paused"])
        n = len([e for e in seen() if e["type"] == "round"])
        time.sleep(3.0)
        assert len([e for e in seen() if e["type"] == "round"]) == n
        proc.stdin.write('{"cmd": "stop"}\n')
        proc.stdin.flush()
        assert proc.wait(300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    stops = [e for e in seen() if e["type"] == "stop"]
    assert stops and stops[0]["reason"] == "stop command"
    states = [e["state"] for e in seen() if e["type"] == "state"]
    assert states[0] == "running" and "finishing" in states and states[-1] == "stopping"
