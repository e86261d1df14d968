"""Try your model, app side: the real window and tab offscreen, the real channel, a scripted engine child
(tests/scripted_engine.py) that answers ``ask`` commands with scripted ``answer`` events. The engine's own
answering, on the real model, is tests/test_try_model.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from PySide6.QtCore import Qt

from app import engine_process
from app.window import MainWindow
from wire import events as ev

SCRIPT = Path(__file__).resolve().parent / "scripted_engine.py"
NODE = "cd" * 16


def _start(tmp_path: Path, qtbot, window: MainWindow, monkeypatch, answers: list[ev.Answer]) -> list[str]:
    """The window's engine as the scripted child; returns the command lines it was sent (from the log)."""
    events = [ev.Start(node_id=NODE, node_name="calm-heron-07", model="smollm2-135m", model_path="/m.gguf",
                       round_start=3, round_end=None, threads=2, task_mix=["basic_arithmetic", "gcd"]),
              ev.StateChanged(state="running", round=3)]
    (tmp_path / "events.jsonl").write_bytes(b"".join(ev.encode(e) for e in events))
    (tmp_path / "answers.jsonl").write_bytes(b"".join(ev.encode(a) for a in answers))
    monkeypatch.setenv("SCRIPTED_ANSWERS", str(tmp_path / "answers.jsonl"))
    monkeypatch.setattr(engine_process, "engine_program",
                        lambda: (sys.executable, [str(SCRIPT), str(tmp_path / "events.jsonl")]))
    sent: list[str] = []
    window.engine.send = _recording(window.engine.send, sent)  # the real send, its lines kept for the test
    window.start()
    qtbot.wait_until(lambda: window.engine.state == "running", timeout=20_000)
    return sent


def _recording(send, sent: list[str]):
    def wrapper(command: ev.Command) -> bool:
        sent.append(ev.encode(command).decode())
        return send(command)
    return wrapper


def test_a_typed_question_shows_both_answers_side_by_side(qtbot, window, tmp_path, monkeypatch):
    tab = window.dashboard.try_model
    assert not tab.ask_button.isEnabled()  # no engine: nothing to ask yet, and it says why
    assert "Start training" in tab.status.text()
    sent = _start(tmp_path, qtbot, window, monkeypatch, [
        ev.Answer(id="", question="What is 17 + 25?", base="17 + 25 = 32 <answer>32</answer>",
                  trained="17 + 25 = 42 <answer>42</answer>", round=3, seconds=2.4)])
    assert [tab.source.itemText(i) for i in range(tab.source.count())] == [
        "My own question", "A question from basic arithmetic", "A question from gcd"]
    assert not tab.ask_button.isEnabled()  # running, but no question typed yet
    qtbot.keyClicks(tab.question, "What is 17 + 25?")
    assert tab.ask_button.isEnabled()
    qtbot.keyClick(tab.question, Qt.Key.Key_Return)
    ask = ev.decode_command(sent[-1])
    assert ask == ev.Ask(id=ask.id, question="What is 17 + 25?", max_tokens=128)
    assert not tab.ask_button.isEnabled() and "next pause point" in tab.status.text()  # one question at a time
    qtbot.wait_until(lambda: tab.pending is None, timeout=10_000)
    assert tab.base_text.toPlainText() == "17 + 25 = 32 <answer>32</answer>"
    assert tab.trained_text.toPlainText() == "17 + 25 = 42 <answer>42</answer>"
    assert tab.trained_box.title() == "After 3 rounds of training (your model)"
    assert tab.base_score.text() == "" and tab.trained_score.text() == ""  # typed: nothing to score against
    assert tab.status.text() == "Answered in 2.4 s." and tab.ask_button.isEnabled()


def test_a_task_question_shows_the_question_expected_answer_and_scores(qtbot, window, tmp_path, monkeypatch):
    tab = window.dashboard.try_model
    sent = _start(tmp_path, qtbot, window, monkeypatch, [
        ev.Answer(id="", task="gcd", question="Find the GCD of 12 and 18.", expected="6",
                  base="<answer>3</answer>", trained="<answer>6</answer>", base_score=0.0, trained_score=1.0,
                  base_correct=False, trained_correct=True, round=1, seconds=1.0),
        ev.Answer(id="", task="no", error="unknown task 'no': this node trains on gcd")])
    tab.source.setCurrentIndex(2)
    assert not tab.question.isEnabled() and tab.ask_button.isEnabled()  # a task question needs no typing
    qtbot.mouseClick(tab.ask_button, Qt.MouseButton.LeftButton)
    assert json.loads(sent[-1]) | {"id": "x"} == {"cmd": "ask", "id": "x", "question": "", "task": "gcd",
                                                  "max_tokens": 128}
    qtbot.wait_until(lambda: tab.pending is None, timeout=10_000)
    assert tab.asked_text.text() == "Question (from gcd): Find the GCD of 12 and 18.\nExpected answer: 6"
    assert tab.base_score.text() == "✗ not correct (score 0.00 of 1)" and tab.trained_score.text() == "✓ correct"
    assert tab.trained_box.title() == "After 1 round of training (your model)"
    qtbot.mouseClick(tab.ask_button, Qt.MouseButton.LeftButton)  # the engine's error is one line, the last answers stay
    qtbot.wait_until(lambda: tab.pending is None, timeout=10_000)
    assert tab.status.text() == "No answer: unknown task 'no': this node trains on gcd"
    assert tab.trained_text.toPlainText() == "<answer>6</answer>"
    with qtbot.wait_signal(window.engine.finished, timeout=20_000):
        window.stop()
    assert not tab.ask_button.isEnabled() and "Start training" in tab.status.text()


def test_an_answer_before_any_training_says_so_and_stray_answers_are_ignored(qtbot):
    from app.try_model import TryModelTab

    tab = TryModelTab()
    qtbot.addWidget(tab)
    tab.set_live(True)
    tab.question.setText("hi")
    seen: list[ev.Ask] = []
    tab.asked.connect(seen.append)
    tab.ask()
    tab.show_answer(ev.Answer(id="someone-else", base="x"))
    assert tab.pending == seen[0].id and tab.base_text.toPlainText() == ""
    tab.show_answer(ev.Answer(id=seen[0].id, question="hi", base="hello", trained=None))
    assert tab.base_text.toPlainText() == "hello" and "No training yet" in tab.trained_score.text()
