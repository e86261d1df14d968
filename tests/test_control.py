"""The command channel into a running node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from engine.control import Control


def test_commands_flip_the_switches_and_bad_lines_are_only_warnings():
    said: list[tuple[str, dict]] = []
    c = Control(lambda type_, **f: said.append((type_, f)))
    c.apply('{"cmd": "pause"}')
    assert c.paused
    c.apply('{"cmd": "resume"}')
    assert not c.paused
    c.apply('{"cmd": "set_threads", "threads": 3}')
    assert c.threads == 3
    for junk in ("not json", '{"cmd": 5}', '{"cmd": "explode"}', '{"cmd": "set_threads", "threads": 0}', '{"x": 1}'):
        c.apply(junk)
    assert [t for t, _ in said] == ["status", "status", "status"] + ["warning"] * 5
    c.apply('{"cmd": "pause"}')
    c.apply('{"cmd": "stop"}')
    assert c.stop_requested and not c.paused  # stopping wakes a paused node


def test_pause_resume_stop_a_real_node(tmp_path, model_cache):
    data = tmp_path / "data"
    data.mkdir()
    (data / "node.json").write_text(json.dumps({"node_id": "c0" * 16}))
    events = tmp_path / "events.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "run", "--model", "smollm2-135m", "--offline", "--tasks", "basic_arithmetic",
         "--local", "2", "--external", "0", "--completions", "2", "--max-tokens", "16", "--eval-every", "0",
         "--threads", "2", "--quiet", "--control", "stdin", "--data-dir", str(data), "--events", str(events)],
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
        wait_for(lambda ev: any(e.get("paused") is True for e in ev))
        time.sleep(1.0)  # the round in flight, if any, may finish...
        n = len([e for e in seen() if e["type"] == "round"])
        time.sleep(4.0)  # ... but no new round starts while paused
        assert len([e for e in seen() if e["type"] == "round"]) <= n
        proc.stdin.write('{"cmd": "set_threads", "threads": 1}\n{"cmd": "resume"}\n')
        proc.stdin.flush()
        wait_for(lambda ev: len([e for e in ev if e["type"] == "round"]) > n)
        proc.stdin.write('{"cmd": "stop"}\n')
        proc.stdin.flush()
        assert proc.wait(300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    stops = [e for e in seen() if e["type"] == "stop"]
    assert stops and stops[0]["reason"] == "stop command"
