"""Try your model, engine side: ``ask`` in, ``answer`` out, on the real model, real llama.cpp and a real
trained adapter; the base answer is the adapter switched off."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.run.control import MAX_PENDING_ASKS, Control
from tests.threads import THREADS
from wire import events as ev

# One real node start and round: ~2 min idle, far more on a loaded 2-core machine
pytestmark = [pytest.mark.timeout(3000), pytest.mark.slow]  # slow: started first on several workers
NODE_ID = "7e11" * 8
# One round of a tiny node with a learning rate high enough that one update moves greedy answers.
ONE_ROUND = ["--model", "smollm2-135m", "--offline", "--tasks", "basic_arithmetic", "--local", "4", "--external", "0",
             "--completions", "4", "--max-tokens", "24", "--eval-every", "0", "--threads", str(THREADS), "--quiet",
             "--lr", "0.02", "--events", "-", "--control", "stdin"]
QUESTION = "What is 7 + 5? Think briefly, then answer."


class Engine:
    """A real ``sapo-engine run`` child on the app's channel: events read in a thread, commands written."""

    def __init__(self, data: Path, cache: Path, *extra: str) -> None:
        env = {**os.environ, "SAPO_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0"}
        self.proc = subprocess.Popen([sys.executable, "-m", "engine", "run", *ONE_ROUND, "--data-dir", str(data), *extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env)
        self.events: queue.Queue[ev.Event] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.stderr: list[str] = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.events.put(ev.decode_event(line))  # every stdout line is an event (the channel's promise)

    def send(self, command: ev.Command) -> None:
        self.proc.stdin.write(ev.encode(command).decode())
        self.proc.stdin.flush()

    def wait_for(self, match, timeout: float = 600) -> ev.Event:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if match(event):
                return event
        raise AssertionError("no such event; stderr: " + "".join(self.stderr[-20:]))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.send(ev.StopCommand())
            self.proc.stdin.close()
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:  # never leave a node running behind a failed test
                self.proc.kill()
                self.proc.wait(30)


@pytest.fixture(scope="module")
def asked(tmp_path_factory, model_cache):
    """One trained round, then paused (finish), and three asks answered while paused."""
    data = tmp_path_factory.mktemp("try") / "data"
    data.mkdir(parents=True)
    (data / "node.json").write_text(json.dumps({"node_id": NODE_ID}))
    engine = Engine(data, model_cache)
    try:
        start = engine.wait_for(lambda e: isinstance(e, ev.Start), 900)
        engine.send(ev.Finish())  # round 1, then pause: answers come from a paused node at once
        engine.wait_for(lambda e: isinstance(e, ev.StateChanged) and e.state == "paused")
        engine.send(ev.Ask(id="typed", question=QUESTION, max_tokens=48))
        engine.send(ev.Ask(id="task", task="basic_arithmetic", max_tokens=48))
        engine.send(ev.Ask(id="bad", task="no_such_task"))
        answers = {}
        while len(answers) < 3:
            a = engine.wait_for(lambda e: isinstance(e, ev.Answer), 300)
            answers[a.id] = a
        engine.send(ev.StopCommand())  # a paused node stops at once
        engine.wait_for(lambda e: isinstance(e, ev.Stop), 300)
    finally:
        engine.stop()
    return start, answers, data


def test_start_names_the_tasks_an_ask_may_draw_from(asked):
    start, _, _ = asked
    assert start.task_mix == ["basic_arithmetic"]


def test_a_typed_question_gets_the_base_and_the_trained_answer_as_llama_cpp_gives_them(asked):
    """Replayed independently in llama.cpp: the base answer is the model without the adapter, the trained
    answer the model with the adapter file the node wrote; one update at this learning rate changes it."""
    from engine.sampling.llm import LlamaModel
    from engine.sampling.rollout import RolloutGenerator, SamplingParams
    from engine.tasks.questions import build_messages

    start, answers, data = asked
    a = answers["typed"]
    assert a.error == "" and a.question == QUESTION and a.round == 1 and a.seconds > 0
    assert a.base and a.trained is not None and a.base_score is None  # a typed question has no score
    assert a.base != a.trained
    adapter = next((data / "adapters").glob("lora-*.gguf"))
    llm = LlamaModel(Path(start.model_path), n_ctx=1024, n_seq_max=2, threads=THREADS)
    try:
        prompt = llm.prompt_tokens(build_messages(QUESTION, []))
        params = SamplingParams(max_tokens=48, temperature=0.0)
        gen = RolloutGenerator(llm)
        assert gen.generate([prompt], 1, params)[0][0].text == a.base
        llm.swap_adapter(adapter)
        assert gen.generate([prompt], 1, params)[0][0].text == a.trained
        llm.use_adapter(False)  # off and on again without a reload: the same two answers
        assert gen.generate([prompt], 1, params)[0][0].text == a.base
        llm.use_adapter(True)
        assert gen.generate([prompt], 1, params)[0][0].text == a.trained
    finally:
        llm.close()


def test_a_task_question_is_drawn_scored_and_comes_with_its_reference(asked):
    _, answers, _ = asked
    a = answers["task"]
    assert a.error == "" and a.task == "basic_arithmetic" and a.expected
    assert a.expected in a.question or "=" in a.question or "?" in a.question or a.question
    for score, correct in ((a.base_score, a.base_correct), (a.trained_score, a.trained_correct)):
        assert score is not None and 0.0 <= score <= 1.0 and correct == (score >= 1.0)


def test_an_unknown_task_is_one_line_and_the_run_goes_on(asked):
    _, answers, _ = asked
    assert answers["bad"].error.startswith("unknown task 'no_such_task'") and "basic_arithmetic" in answers["bad"].error


# --- the control's queue, without a model ---

def test_asks_wait_for_a_pause_point_and_a_paused_node_answers_at_once():
    said: list[ev.Event] = []
    c = Control(said.append)
    served = []
    c.serve = lambda ask: served.append(threading.current_thread().name) or ev.Answer(id=ask.id, base="b")
    c.apply(json.dumps({"cmd": "ask", "id": "1", "question": "hi"}))
    assert said == []  # queued: nothing happens until the loop reaches a pause point
    c.wait_if_paused()  # a pause point while running: answered there, then the loop goes on
    assert [type(e) for e in said] == [ev.Answer] and said[0].id == "1"
    c.apply('{"cmd": "pause"}')
    loop = threading.Thread(target=c.wait_if_paused, name="loop")
    loop.start()
    c.apply(json.dumps({"cmd": "ask", "id": "2", "task": "gcd"}))
    deadline = time.monotonic() + 5
    while len(said) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [getattr(e, "id", None) or e.state for e in said[1:]] == ["paused", "2"]
    assert served[-1] == "loop" and loop.is_alive()  # answered by the loop thread, still paused
    c.apply('{"cmd": "resume"}')
    loop.join(5)
    assert said[-1].state == "running"


def test_too_many_waiting_asks_and_bad_asks_are_answered_not_fatal():
    said: list[ev.Event] = []
    c = Control(said.append)
    for i in range(MAX_PENDING_ASKS + 1):
        c.apply(json.dumps({"cmd": "ask", "id": str(i), "question": "q"}))
    assert [e.id for e in said] == [str(MAX_PENDING_ASKS)] and "already waiting" in said[0].error
    for junk in ('{"cmd": "ask", "id": "x"}', '{"cmd": "ask", "id": "x", "question": "q", "task": "gcd"}',
                 '{"cmd": "ask", "id": "", "question": "q"}', '{"cmd": "ask", "id": "x", "question": "q", "max_tokens": 0}',
                 json.dumps({"cmd": "ask", "id": "x", "question": "q" * (ev.MAX_QUESTION_CHARS + 1)})):
        c.apply(junk)
    assert [type(e) for e in said[1:]] == [ev.Warning] * 5

    def broken(ask: ev.Ask) -> ev.Event:
        raise RuntimeError("llama_decode failed")

    c.serve = broken
    c.wait_if_paused()
    assert all(isinstance(e, ev.Answer) and "llama_decode failed" in e.error for e in said[6:])
    assert len(said) == 6 + MAX_PENDING_ASKS
