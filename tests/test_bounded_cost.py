"""Bounded cost per sender: every scorer's work is bounded whatever the answer, and so is every generator's.

Property tests (hypothesis) throw adversarial answers of up to MAX_ANSWER_CHARS at each scorer of the easy and
paper presets (and, marked slow, at every dataset the first wall has a safe scorer for), through the real first
wall: random text over the scorer's syntax, deep nesting, many variable names, nested function calls. Each
answer must be scored within ANSWER_CPU_S (+ slack) CPU seconds and 256 MB of Python allocations. The classes
found in issue 23 are refused by the first wall itself, before the scorer or the CPU limit is reached.
"""

from __future__ import annotations

import string
import time
import tracemalloc

import pytest
import reasoning_gym
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.sandbox.safe_scoring import (
    ANSWER_CPU_S,
    MAX_ANSWER_CHARS,
    SAFE_SCORERS,
    score_answer,
)
from engine.tasks.questions import EASY_CONFIGS, PAPER_TASKS

SLACK_CPU_S = 0.5
MAX_PEAK_BYTES = 256 * 2**20
ALPHABET = string.digits + "xXyzPQRSabC" + "+-*/^().,[]{} =_e" + "∧∨¬→↔" + "'\""
NAMES = ["x", "X", "y", "P", "Q", "R", "a", "b", "C", "E", "pi", "sin", "exp", "log", "sqrt", "Abs"]
FUNCS = ["sin", "cos", "tan", "exp", "log", "sqrt", "sinh", "atan", "Integral", "eval", "len"]
OPS = [" + ", "*", "**", "/", " - ", "∧", "∨", "→", "↔", " ", ","]


def _nest(parts: tuple[str, int, str]) -> str:
    head, k, tail = parts
    return head * k + "x" + tail * k


answers = st.one_of(
    st.text(alphabet=ALPHABET, max_size=MAX_ANSWER_CHARS),
    st.text(alphabet=ALPHABET, min_size=20, max_size=120),  # short ones: the were under 60 characters
    st.tuples(st.sampled_from(["(", "[", "¬", "-", "sin(", "exp(", "E**(", "sqrt("]), st.integers(1, 1400),
              st.sampled_from([")", "]", "", ")**2"])).map(_nest),
    st.lists(st.tuples(st.sampled_from(FUNCS + [""]), st.text(string.ascii_letters + string.digits, min_size=1, max_size=3),
                       st.sampled_from(OPS)), min_size=1, max_size=300)
      .map(lambda xs: "".join(f"{f}({v}){op}" if f else f"{v}{op}" for f, v, op in xs).rstrip(" +-*/,∧∨→↔")),
    st.lists(st.sampled_from(NAMES + ["¬P", "(P∨Q)", "x**64", "9**9", "1e999"]), min_size=1, max_size=400)
      .flatmap(lambda xs: st.sampled_from(OPS).map(lambda op: op.join(xs))),
).map(lambda a: a[:MAX_ANSWER_CHARS])

_DATASETS: dict[str, tuple] = {}


def _dataset(name: str):
    if name not in _DATASETS:
        config = {} if name in PAPER_TASKS else EASY_CONFIGS.get(name, {})
        ds = reasoning_gym.create_dataset(name, seed=23, size=8, **config)
        _DATASETS[name] = ds, [ds[i] for i in range(4)]
    return _DATASETS[name]


def _bounded(name: str, answer: str, entry_index: int) -> None:
    ds, entries = _dataset(name)
    entry = entries[entry_index]
    tracemalloc.start()
    c0, t0 = time.process_time(), time.perf_counter()
    try:
        score = score_answer(name, ds, answer, entry)
    except Exception:  # noqa: BLE001 - a raising scorer is a 0 in the sandbox (engine.tasks.rewards.answer_score)
        score = 0.0
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert cpu < ANSWER_CPU_S + SLACK_CPU_S, (name, answer[:80], len(answer), cpu, wall)
    assert peak < MAX_PEAK_BYTES, (name, answer[:80], peak)
    assert 0.0 <= float(score) <= 1.0


PRESET_TASKS = sorted(set(PAPER_TASKS) | set(EASY_CONFIGS))
OTHER_SAFE = sorted(set(SAFE_SCORERS) - set(PRESET_TASKS))


@pytest.mark.parametrize("name", PRESET_TASKS)
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(answer=answers, entry_index=st.integers(0, 3))
def test_every_preset_scorer_is_bounded_on_adversarial_answers(name, answer, entry_index):
    _bounded(name, answer, entry_index)


@pytest.mark.slow
@pytest.mark.parametrize("name", OTHER_SAFE)
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(answer=answers, entry_index=st.integers(0, 3))
def test_every_safe_scorer_is_bounded_on_adversarial_answers(name, answer, entry_index):
    _bounded(name, answer, entry_index)


# The classes found in issue 23: the first wall refuses them outright (no CPU limit needed, a millisecond each).
LETTERS = string.ascii_lowercase


@pytest.mark.parametrize("name, answer", [
    ("propositional_logic", "∨".join(LETTERS[:18])),  # a truth table of 2**18 rows
    ("propositional_logic", "∨".join(f"a{i}" for i in range(16))),
    ("propositional_logic", "P" + "∧P" * 2000),  # quadratic parse, recursion as deep as the operators
    ("propositional_logic", "¬" * 4000 + "P"),
    ("propositional_logic", "(" * 1000 + "P" + ")" * 1000),
    ("intermediate_integration", "exp(" * 8 + "{v}" + ")" * 8),
    ("intermediate_integration", "sin(" * 8 + "{v}" + ")" * 8),
    ("intermediate_integration", "*".join(f"{f}({{v}})" for f in ("sin", "cos", "tan", "exp", "log", "sinh", "cosh"))),
    ("simple_integration", "exp(" * 8 + "{v}" + ")" * 8),
    ("simple_integration", "E**(E**(E**{v}))"),
])
def test_the_found_classes_are_refused_by_the_first_wall(name, answer):
    ds, entries = _dataset(name)
    c0 = time.process_time()
    answer = answer.replace("{v}", entries[0]["metadata"].get("variable", "x"))
    assert score_answer(name, ds, answer, entries[0], cpu_s=60.0) == 0.0
    assert time.process_time() - c0 < 0.2


def test_honest_logic_answers_keep_their_score():
    ds, entries = _dataset("propositional_logic")
    for e in entries:
        vs = e["metadata"]["variables"]
        for a in [f"({vs[0]} ∨ ¬{vs[0]})", f"({vs[0]} → {vs[1]})", " ∧ ".join(e["metadata"]["premises"]), vs[0],
                  f"¬(¬{vs[0]} ∧ {vs[1]})", "Z ∨ P", "(a ∨ P)"]:
            assert score_answer("propositional_logic", ds, a, e) == ds.score_answer(a, e), a


@pytest.mark.parametrize("slow", [
    "tan(sin(x))*cosh(exp(x))*atan(log(x))",  # within the structural bounds, 30 s of simplify
    "x**64*sin(x)**64*cos(x)**64*tan(x)**64*exp(x)**64*log(x)**64",  # 2 minutes
])
def test_a_scorer_past_its_cpu_budget_scores_zero(slow):
    """What the structural bounds let through (sympy's simplify has no useful size bound) the CPU limit stops."""
    ds, entries = _dataset("intermediate_integration")
    c0 = time.process_time()
    v = entries[0]["metadata"]["variable"]
    slow = slow.replace("(x)", f"({v})").replace("x**", f"{v}**")
    assert score_answer("intermediate_integration", ds, slow, entries[0], cpu_s=0.2) == 0.0
    assert time.process_time() - c0 < 0.6


def test_a_generator_that_never_ends_is_cut_softly():
    """Settings inside ANY_TASK_CAPS whose generator loops are refused by admit; the sandbox's generation budget
    ends whatever else loops, without killing the worker."""
    from engine.sandbox.workers import GENERATION_CPU_S, Job, run_job
    from engine.tasks.questions import admit
    from wire.protocol import TaskSpec

    loops = [TaskSpec(dataset="base_conversion", config={"min_base": 18, "max_base": 18}, seed=1, index=0),
             TaskSpec(dataset="calendar_arithmetic", config={"offset_upper_bound": 0}, seed=1, index=0)]
    assert [admit(s, (), any_task=True) for s in loops] == ["bad_spec", "bad_spec"]
    c0 = time.process_time()
    assert run_job(Job(loops[0], ["1"])).reason == "timeout"
    assert time.process_time() - c0 < GENERATION_CPU_S + SLACK_CPU_S


def test_a_job_of_slow_answers_stops_at_its_budget():
    """Each answer stops at ANSWER_CPU_S, the job at JOB_CPU_S: eight answers that would each take minutes cost
    the worker about JOB_CPU_S, scored 0, and the worker is not killed."""
    from engine.sandbox.workers import JOB_CPU_S, Job, run_job
    from engine.tasks.questions import QuestionStream, build_mix

    q = QuestionStream(build_mix("easy", tasks=["intermediate_integration"]), "b" * 32, 0, []).draw(1)[0]
    v = q.entry["metadata"]["variable"]
    slow = [f"{v}**{k}*" + "*".join(f"{f}({v})**64" for f in ("sin", "cos", "tan", "exp", "log")) for k in range(8)]
    c0 = time.process_time()
    result = run_job(Job(q.spec, [q.answer, *slow]))
    assert result.reason == "timeout" and result.scores[0] == 1.0 and result.scores[1:] == [0.0] * 8
    assert time.process_time() - c0 < JOB_CPU_S + SLACK_CPU_S
