"""The sandbox pool on real worker processes: scores, refuses, survives hangs and deaths."""

from __future__ import annotations

import time

import pytest

from engine.sandbox.safe_scoring import SAFE_SCORERS
from engine.sandbox.workers import DEFAULT_MEMORY_MB, PROBES_ENV, Job, Sandbox, _Worker
from engine.tasks.questions import QuestionStream, TaskEntry, build_mix
from wire.protocol import TaskSpec


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, timeout_s=3.0) as sb:
        yield sb


def _question(dataset: str, **config):
    return QuestionStream((TaskEntry(dataset, config=config),), "e" * 32, 0, []).draw(1)[0]


def test_a_group_is_scored_and_keyed(sandbox):
    q = _question("basic_arithmetic")
    (r,) = sandbox.run([Job(q.spec, [q.answer, "999999", None], q.question, q.answer)])
    assert r.ok and r.scores == [1.0, 0.0, 0.0] and r.key and r.key.startswith("basic_arithmetic:")


def test_jobs_run_in_parallel_and_keep_their_order(sandbox):
    qs = QuestionStream(build_mix("easy"), "f" * 32, 0, []).draw(12)
    results = sandbox.run([Job(q.spec, [q.answer, "no"]) for q in qs])
    assert [r.scores[0] for r in results] == [1.0] * 12 and all(r.ok for r in results)


def test_mismatches_and_bad_specs_are_reasons(sandbox):
    q = _question("basic_arithmetic")
    assert sandbox.run([Job(q.spec, ["1"], q.question + " ", q.answer)])[0].reason == "question_mismatch"
    assert sandbox.run([Job(q.spec, ["1"], q.question, "12")])[0].reason == "answer_mismatch"
    bad = TaskSpec(dataset="basic_arithmetic", config={"max_terms": "many"}, seed=1, index=0)
    r = sandbox.run([Job(bad, ["1", "2"])])[0]
    assert r.reason == "bad_spec" and r.scores == [0.0, 0.0]


@pytest.mark.parametrize("dataset", sorted(SAFE_SCORERS))
def test_code_in_answers_never_runs_in_a_worker(sandbox, dataset, tmp_path):
    marker = tmp_path / "marker"
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('pwned')"
    q = _question(dataset)
    (r,) = sandbox.run([Job(q.spec, [code, f"[{code}]", f"{code} + C", "9**9**9**9"])])
    assert r.ok and max(r.scores) <= 0.05
    assert not marker.exists()


def test_a_slow_answer_is_cut_by_its_cpu_limit_and_the_others_keep_their_scores():
    # Allowed by the safe checks (small powers), but sympy's simplify of its derivative never ends:
    # the per-answer CPU limit (ANSWER_CPU_S) ends it and it scores 0; the job and the worker go on.
    q = _question("simple_integration")
    v = q.entry["metadata"]["variable"]
    slow = " * ".join(f"({v} + {k})**60" for k in range(1, 12)) + " + C"
    with Sandbox(workers=1, timeout_s=60.0) as sb:  # a wall far away: the CPU limit is what acts
        t0 = time.perf_counter()
        (r,) = sb.run([Job(q.spec, [q.answer, slow])])
        assert r.ok and r.scores == [1.0, 0.0]
        assert time.perf_counter() - t0 < 30
        assert sb.restarts == 0


class _SleepyWorker(_Worker):
    """Runs test probes (PROBES_ENV, set here only): code that waits without using CPU, which no CPU
    limit ends, as a scorer stuck in a system call would."""

    def environment(self) -> dict[str, str]:
        return {**super().environment(), PROBES_ENV: "1"}


@pytest.fixture
def prober():
    """A started worker that runs test probes, and a spec to send it; killed after the test."""
    w = _SleepyWorker(DEFAULT_MEMORY_MB)
    w.start()
    try:
        w.wait_ready()
        yield w, _question("basic_arithmetic").spec
    finally:
        w.kill()


def test_a_job_no_cpu_limit_ends_is_killed_by_the_wall_clock_and_the_worker_replaced():
    w = _SleepyWorker(DEFAULT_MEMORY_MB)
    w.start()
    try:
        w.wait_ready()
        spec = _question("basic_arithmetic").spec
        t0 = time.perf_counter()
        r = w.call(Job(spec, ["1"]), 1.5, probe="import time; time.sleep(60)")
        assert r.reason == "timeout" and r.scores == [0.0]
        assert time.perf_counter() - t0 < 15
        assert w.proc is None or w.proc.poll() is not None  # that process is gone
        again = w.call(Job(spec, []), 10.0, probe="result = 6 * 7")  # a fresh one takes over
        assert again.reason == "ok: 42"
    finally:
        w.kill()


# Code that has taken a worker over (a scorer's, past the first wall) writes to the parent's reply pipe itself: a
# reply nested 300,000 deep, in a field the parent does not know.
DEEP_REPLY = """
import sys
frame = sys._getframe()
while "replies" not in frame.f_locals:
    frame = frame.f_back
frame.f_locals["replies"].write(b'{"id": 1, "x": ' + b"[" * 300_000 + b"}\\n")
frame.f_locals["replies"].flush()
"""


def test_a_worker_that_answers_json_nested_past_the_stack_is_replaced(prober):
    """msgspec recursed into the reply and raised RecursionError, which went past the parent's DecodeError handler
    and up through the node's round; now the worker is killed, its job failed and a fresh one takes over."""
    w, spec = prober
    r = w.call(Job(spec, ["1"]), 10.0, probe=DEEP_REPLY)
    assert r.reason == "worker_died" and r.scores == [0.0]
    assert w.proc is None or w.proc.poll() is not None
    assert w.call(Job(spec, []), 10.0, probe="result = 6 * 7").reason == "ok: 42"


def test_the_parent_reads_a_bounded_part_of_what_a_worker_writes():
    """A worker taken over could write without end: one endless line, or lines it was not asked for. The reader
    keeps at most a reply's length, or MAX_PENDING_LINES lines, then b"" (no reply: the caller kills the worker)."""
    import io
    import queue

    from engine.sandbox.workers import MAX_PENDING_LINES, MAX_REPLY_BYTES, _pump

    def pumped(data: bytes) -> tuple[list[bytes | None], int]:
        stream, lines = io.BytesIO(data), queue.Queue()
        _pump(stream, lines)
        return [lines.get_nowait() for _ in range(lines.qsize())], stream.tell()

    got, read = pumped(b"x" * 50_000_000)
    assert got == [b"", None] and read == MAX_REPLY_BYTES + 1  # not the 50 MB
    got, read = pumped(b'{"id": 1}\n' * 1_000_000)
    assert got == [b'{"id": 1}\n'] * MAX_PENDING_LINES + [b"", None] and read < 100
    assert pumped(b'{"ready": 1}\n{"id": 1}\n') == ([b'{"ready": 1}\n', b'{"id": 1}\n', None], 23)  # as asked


ENDLESS_LINE = """
import sys
frame = sys._getframe()
while "replies" not in frame.f_locals:
    frame = frame.f_back
for _ in range(100):  # 100 MB with no end of line
    frame.f_locals["replies"].write(b"x" * 1_000_000)
"""


def test_a_worker_that_writes_an_endless_line_is_replaced(prober):
    w, spec = prober
    r = w.call(Job(spec, ["1"]), 10.0, probe=ENDLESS_LINE)
    assert r.reason == "worker_died" and r.scores == [0.0]
    assert w.call(Job(spec, []), 10.0, probe="result = 6 * 7").reason == "ok: 42"


# A taken-over worker answers the request in flight itself (its id read from the worker's loop), with SCORES.
FORGED_REPLY = """
import sys
frame = sys._getframe()
while "replies" not in frame.f_locals:
    frame = frame.f_back
reply = b'{"id": %d, "result": {"scores": %s}}\\n' % (frame.f_locals["req"].id, SCORES)
frame.f_locals["replies"].write(reply)
frame.f_locals["replies"].flush()
"""


@pytest.mark.parametrize("scores, reason", [
    (b"[5.0]", "worker_died"),  # a reward outside [0, 1] went into the node's advantages
    (b"[1.0, 1.0]", "worker_died"),  # two scores for one answer: zip() paired them with the wrong completions
    (b"[-1e308]", "worker_died"),
    (b"[1.0]", None),  # a lie within the bounds is not seen here: the jail is what keeps a worker honest
])
def test_a_forged_reply_outside_a_replys_bounds_kills_the_worker(prober, scores, reason):
    w, spec = prober
    r = w.call(Job(spec, ["1"]), 10.0, probe=FORGED_REPLY.replace("SCORES", repr(scores)))
    assert r.reason == reason and r.scores == ([0.0] if reason else [1.0])


def test_a_worker_that_cannot_live_is_a_clear_result():
    q = _question("basic_arithmetic")
    with Sandbox(workers=1, timeout_s=5.0, memory_mb=16) as sb:  # too little to even load reasoning-gym
        (r,) = sb.run([Job(q.spec, [q.answer])])
    assert r.reason == "worker_died" and r.scores == [0.0]
