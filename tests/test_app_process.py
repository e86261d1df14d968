"""The app's channel to its engine, against a tiny scripted child: events, garbage, commands, crashes."""

from __future__ import annotations

import signal
import sys
import textwrap

import pytest

from app.outcome import Outcome, split_lines
from wire import events as ev

FAKE_ENGINE = textwrap.dedent(r'''
    import json, os, signal, sys, time
    mode = sys.argv[1]
    def say(obj):
        sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
    say({"type": "start", "node_id": "ab" * 16, "node_name": "brave-otter-1", "model": "smollm2-135m",
         "model_path": "/m.gguf", "round_start": 0, "round_end": None, "threads": 2, "settings": {}, "schema": 1})
    say({"type": "state", "state": "running", "round": 0})
    sys.stdout.write("this is not json\n")
    sys.stdout.buffer.write(b"bad bytes \xff\xfe here\n")
    say({"type": "from_the_future", "x": 1})
    sys.stdout.write('{"type": "round", "round": "one"}\n')  # a known type, broken fields
    sys.stdout.flush()
    sys.stderr.write("progress 1%\rprogress 50%\rprogress 100%\n"); sys.stderr.flush()
    if mode == "crash":
        for i in range(30):
            sys.stderr.write(f"stderr line {i}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "error":
        say({"type": "error", "message": "config file not found: /nope.toml", "kind": "user"})
        sys.exit(2)
    if mode == "exit3":
        sys.exit(3)
    rnd = 0
    for line in sys.stdin:
        cmd = json.loads(line)["cmd"]
        if cmd == "pause":
            say({"type": "state", "state": "paused", "round": rnd})
        elif cmd == "resume":
            say({"type": "state", "state": "running", "round": rnd})
        elif cmd == "set_threads":
            say({"type": "status", "message": "threads %d" % json.loads(line)["threads"]})
        elif cmd == "stop":
            say({"type": "state", "state": "stopping", "round": rnd})
            say({"type": "stop", "round": rnd, "reason": "stop command"})
            sys.exit(0)
    say({"type": "stop", "round": rnd, "reason": "end of input"})
    sys.stdout.write("last line without a newline")
''')


@pytest.fixture
def fake(tmp_path):
    path = tmp_path / "fake_engine.py"
    path.write_text(FAKE_ENGINE)
    return path


@pytest.fixture
def engine(qtbot):
    from app.engine_process import EngineProcess

    proc = EngineProcess()
    events, logs, states = [], [], []
    proc.event.connect(events.append)
    proc.log_line.connect(logs.append)
    proc.state_changed.connect(states.append)
    proc.seen = (events, logs, states)
    yield proc
    if proc.running:  # teardown kills leftovers
        proc._proc.kill()
        proc._proc.wait(5000)


def _start(engine, fake, mode):
    assert engine.start([str(fake), mode], program=sys.executable, program_args=[])


def test_events_are_typed_and_garbage_goes_to_the_log(qtbot, engine, fake):
    events, logs, states = engine.seen
    with qtbot.wait_signal(engine.state_changed, timeout=20_000, check_params_cb=lambda s: s == "running"):
        _start(engine, fake, "commands")
    qtbot.wait_until(lambda: any("progress 100%" in x for x in logs), timeout=20_000)
    assert [type(e) for e in events[:2]] == [ev.Start, ev.StateChanged]
    assert events[0].node_name == "brave-otter-1"
    assert "this is not json" in logs
    assert "bad bytes \ufffd\ufffd here" in logs  # decoded with errors='replace'
    assert any(x.startswith('{"type": "round"') for x in logs)  # a broken known event: logged, not fatal
    assert not any("from_the_future" in x for x in logs)  # an unknown type is skipped quietly
    assert {"progress 1%", "progress 50%", "progress 100%"} <= set(logs)  # \r-redrawn lines split
    with qtbot.wait_signal(engine.state_changed, timeout=20_000, check_params_cb=lambda s: s == "paused"):
        assert engine.pause()
    with qtbot.wait_signal(engine.event, timeout=20_000,
                           check_params_cb=lambda e: isinstance(e, ev.Status) and e.message == "threads 3"):
        assert engine.set_threads(3)
    with qtbot.wait_signal(engine.state_changed, timeout=20_000, check_params_cb=lambda s: s == "running"):
        assert engine.resume()
    with qtbot.wait_signal(engine.finished, timeout=20_000) as blocker:
        engine.stop()
    outcome = blocker.args[0]
    assert outcome.ok and outcome.exit_code == 0
    assert outcome.sentence() == "The engine stopped normally."
    assert states == ["starting", "running", "paused", "running", "stopping", "stopped"]
    assert isinstance(events[-1], ev.Stop) and events[-1].reason == "stop command"
    assert not engine.running and not engine.send(ev.Pause())  # no child: commands say so


def test_end_of_input_and_an_unterminated_last_line(qtbot, engine, fake):
    events, logs, _ = engine.seen
    _start(engine, fake, "commands")
    qtbot.wait_until(lambda: engine.state == "running", timeout=20_000)
    with qtbot.wait_signal(engine.finished, timeout=20_000):
        engine._proc.close_stdin()
    assert isinstance(events[-1], ev.Stop) and events[-1].reason == "end of input"
    assert logs[-1] == "last line without a newline"


def test_a_crash_is_a_sentence_with_the_last_stderr_lines(qtbot, engine, fake):
    with qtbot.wait_signal(engine.finished, timeout=20_000) as blocker:
        _start(engine, fake, "crash")
    outcome = blocker.args[0]
    assert outcome.crashed and not outcome.ok and not outcome.stopped_by_user
    assert outcome.stderr_tail[-1] == "stderr line 29" and len(outcome.stderr_tail) == 12
    assert outcome.sentence().startswith("The engine crashed")
    assert engine.state == "crashed"


def test_the_engines_error_event_is_the_sentence(qtbot, engine, fake):
    with qtbot.wait_signal(engine.finished, timeout=20_000) as blocker:
        _start(engine, fake, "error")
    outcome = blocker.args[0]
    assert outcome.exit_code == 2 and not outcome.ok
    assert outcome.sentence() == "The engine stopped: config file not found: /nope.toml"


def test_exit_codes_without_a_message(qtbot, engine, fake):
    with qtbot.wait_signal(engine.finished, timeout=20_000) as blocker:
        _start(engine, fake, "exit3")
    assert blocker.args[0].sentence() == "The engine stopped with an error (exit code 3)."
    assert engine.state == "crashed"


def test_a_missing_executable_is_checked_before_starting(qtbot, engine, tmp_path):
    with qtbot.wait_signal(engine.finished, timeout=5_000) as blocker:
        assert not engine.start(["run"], program=str(tmp_path / "no-such-engine"), program_args=[])
    outcome = blocker.args[0]
    assert outcome.start_error and "does not exist" in outcome.start_error
    assert outcome.sentence().startswith("The engine could not be started:")
    assert engine.state == "crashed"
    with qtbot.wait_signal(engine.finished, timeout=5_000) as blocker:
        engine.start(["run"], program="sapo-no-such-program-on-path", program_args=[])
    assert "not found on PATH" in blocker.args[0].start_error


def test_a_child_that_ignores_stop_is_killed_after_the_grace(qtbot, engine, tmp_path):
    stubborn = tmp_path / "stubborn.py"
    stubborn.write_text("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                        "print('{\"type\": \"state\", \"state\": \"running\"}', flush=True)\ntime.sleep(600)\n")
    assert engine.start([str(stubborn)], program=sys.executable, program_args=[])
    qtbot.wait_until(lambda: engine.state == "running", timeout=20_000)
    with qtbot.wait_signal(engine.finished, timeout=20_000) as blocker:
        engine.stop(grace_ms=500)
    outcome = blocker.args[0]
    assert outcome.crashed and outcome.stopped_by_user
    assert outcome.sentence() == "The engine was stopped."
    assert engine.state == "stopped"


def test_a_child_we_kill_is_stopped_not_a_crash_in_the_log(qtbot, tmp_path, caplog):
    # A cancelled download is killed on purpose: the log must not warn that it crashed
    from app.guiprocess import GuiProcess

    proc = GuiProcess("The download")
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    with qtbot.wait_signal(proc.stdout_line, timeout=20_000):
        assert proc.start(sys.executable, [str(sleeper)])
    with caplog.at_level("INFO", logger="app.process"), qtbot.wait_signal(proc.finished, timeout=20_000) as blocker:
        proc.kill()
    outcome = blocker.args[0]
    assert outcome.crashed and outcome.stopped_by_user
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    assert "The download: stopped" in caplog.text


def test_a_child_that_dies_by_itself_is_a_crash_in_the_log(qtbot, tmp_path, caplog):
    from app.guiprocess import GuiProcess

    proc = GuiProcess("The download")
    dier = tmp_path / "dier.py"
    dier.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    with caplog.at_level("INFO", logger="app.process"), qtbot.wait_signal(proc.finished, timeout=20_000) as blocker:
        assert proc.start(sys.executable, [str(dier)])
    assert blocker.args[0].crashed and not blocker.args[0].stopped_by_user
    assert "The download: it crashed" in [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


# --- without Qt ---

def test_outcome_sentences():
    assert Outcome("The engine", exit_code=0).ok
    assert Outcome("X", crashed=True, signal=signal.SIGSEGV).sentence() == "X crashed (SIGSEGV)."
    assert Outcome("X", crashed=True).sentence() == "X crashed."
    assert Outcome("X", exit_code=1, message="boom").sentence() == "X stopped: boom"
    assert not Outcome("X", start_error="nope").ok


def test_split_lines_keeps_the_unfinished_rest():
    buf = bytearray()
    assert split_lines(buf, b"a\nb") == ["a"] and buf == b"b"
    assert split_lines(buf, b"c\n\xe2\x82") == ["bc"] and buf == b"\xe2\x82"  # half a euro sign waits
    assert split_lines(buf, b"\xac\n") == ["\u20ac"]
    assert split_lines(buf, b"1%\r2%\r\n", carriage_returns=True) == ["1%", "2%"]
