"""Safe scorers: the original's score on every honest answer, nothing run, bounded time on hostile ones.

In-process on purpose (these are the pure first wall); the sandbox around them has its own tests.
"""

from __future__ import annotations

import json
import time

import pytest
import reasoning_gym

from engine.tasks.rewards import answer_score
from engine.sandbox.safe_scoring import (MAX_ANSWER_CHARS, SAFE_SCORERS, Unsafe, arithmetic, check_sympy_text, literal,
                                 score_answer)


def _entries(name: str, n: int = 6, **config):
    ds = reasoning_gym.create_dataset(name, seed=11, size=n, **config)
    return ds, [ds[i] for i in range(n)]


def _same(name: str, ds, entry, answers: list[str]) -> None:
    for a in answers:
        assert score_answer(name, ds, a, entry) == ds.score_answer(a, entry), (name, a)


# --- honest answers: the original's score ------------------------------------------------------

def test_eval_datasets_score_as_the_original_on_honest_answers():
    ds, entries = _entries("binary_matrix", max_n=5)
    for e in entries:
        rows = [[int(x) for x in r.split()] for r in e["answer"].splitlines()]
        _same("binary_matrix", ds, e, [e["answer"], str(rows), json.dumps(rows), "0 1\n1 0", "", "[[0]]", "nonsense"])
    ds, entries = _entries("spiral_matrix", max_n=5)
    for e in entries:
        items = [int(x) for x in e["answer"].split()]
        _same("spiral_matrix", ds, e, [e["answer"], str(items), str(tuple(items)), str(items[::-1]), "1 2 3", ""])
    ds, entries = _entries("string_insertion")
    for e in entries:
        _same("string_insertion", ds, e, [e["answer"], str(list(e["answer"])), str(list(e["answer"][::-1])), "ABC", ""])
    ds, entries = _entries("n_queens")
    for e in entries:
        board = [row.split() for row in e["answer"].splitlines()]
        _same("n_queens", ds, e, [e["answer"], str(board), str(board[::-1]), "_ Q\nQ _", ""])


def test_expression_datasets_score_as_the_original_on_honest_answers():
    ds, entries = _entries("countdown")
    for e in entries:
        nums = e["metadata"]["numbers"]
        _same("countdown", ds, e, [e["answer"], " + ".join(map(str, nums)), f"({nums[0]} - {nums[1]}) * 2",
                                   f"{nums[0]} / {nums[1]}", "1 / 0", "", "x + 1", "3 = 3"])
    ds, entries = _entries("puzzle24")
    for e in entries:
        a, b, c, d = e["metadata"]["numbers"]
        _same("puzzle24", ds, e, [e["answer"], f"{a} + {b} + {c} + {d}", f"{a} * {b} - {c} / {d}", "24", "1/0", ""])
    ds, entries = _entries("polynomial_multiplication")
    for e in entries:
        v = e["metadata"]["variables"][0]
        _same("polynomial_multiplication", ds, e, [e["answer"], e["metadata"]["polynomial_expr"], f"{v}**2 + 1",
                                                   e["answer"].replace("+", "-", 1), "", "y + 1"])
    for name in ("simple_integration", "intermediate_integration"):
        ds, entries = _entries(name, n=4)
        for e in entries:
            v = e["metadata"]["variable"]
            _same(name, ds, e, [e["answer"], e["answer"].replace(" + C", ""), f"{v}**2/2 + C", f"sin({v}) + C", "C"])


def test_numeric_datasets_score_as_the_original_on_honest_answers():
    ds, entries = _entries("coin_flip")
    for e in entries:
        _same("coin_flip", ds, e, [e["answer"], "1/2", "0.5", "1e-3", "2.5e2", "1,000", "3/0", ""])
    ds, entries = _entries("rush_hour", n=3)
    for e in entries:  # counts the original can still afford: the clamp changes nothing
        _same("rush_hour", ds, e, ["A+1 B-2", "A+9 C-12", "Z+20", "A+3 A-3 B+7"])
    ds, entries = _entries("rubiks_cube", n=3)
    for e in entries:
        _same("rubiks_cube", ds, e, ["R U R' U'", "R9 U'10", "F13 B2", "X99", "R0 U", "R2' L"])


def test_other_datasets_go_straight_to_reasoning_gym():
    ds, entries = _entries("basic_arithmetic")
    for e in entries:
        _same("basic_arithmetic", ds, e, [e["answer"], "0", "-1"])


# --- hostile answers: nothing runs, bounded time ------------------------------------------------

class _Scorer:
    def __init__(self, name, ds):
        self.name, self.ds = name, ds

    def score_answer(self, answer, entry):
        return score_answer(self.name, self.ds, answer, entry)


CODE = "__import__('pathlib').Path({path!r}).write_text('pwned')"


@pytest.mark.parametrize("name", sorted(SAFE_SCORERS))
def test_code_in_an_answer_is_never_run(name, tmp_path):
    marker = tmp_path / "marker"
    ds, (entry, *_) = _entries(name, n=1)
    code = CODE.format(path=str(marker))
    for answer in (code, f"[{code}]", f"({code}) + 1", f"{code} + C", f"exec({code!r})"):
        assert score_answer(name, ds, answer, entry) <= 0.05
    assert not marker.exists()


@pytest.mark.parametrize("name, answer", [
    ("countdown", "9**9**9**9"), ("puzzle24", "9**9**9**9"), ("countdown", "(9**64)**64**64"),
    ("polynomial_multiplication", "x**9**9**9"), ("simple_integration", "X**(9**9**9) + C"),
    ("coin_flip", "1e999999999"), ("coin_flip", "1e-9_999_999_999"), ("rubiks_cube", "R999999999999"),
    ("rush_hour", "A+99999999999999 " * 200), ("binary_matrix", "[" * 100 + "]" * 100),
    ("countdown", "-" * 3000 + "1"), ("spiral_matrix", "9" * 4000),
    # sympy reads these as Floats whose exact values have a billion digits; made rational in C, past any timer
    ("intermediate_integration", "1e999999999"), ("simple_integration", "1E+999999999*X + C"),
    ("polynomial_multiplication", "-0.1e999999999"), ("polynomial_multiplication", "x*1e-999_999_999"),
])
def test_hostile_answers_take_bounded_time(name, answer):
    ds, (entry, *_) = _entries(name, n=1)
    t0 = time.perf_counter()
    score = answer_score(_Scorer(name, ds), entry, answer)  # as the sandbox scores: a raising scorer is a 0
    assert time.perf_counter() - t0 < 2.0 and 0.0 <= score <= 1.0


def test_coin_flip_clamped_exponent_scores_as_the_unclamped_one():
    ds, (entry, *_) = _entries("coin_flip", n=1)
    for small, huge in (("1e-10001", "1e-99999999"), ("0e10001", "0e999999999"), ("3e10000", "3e99999999")):
        assert answer_score(_Scorer("coin_flip", ds), entry, huge) == answer_score(ds, entry, small)


def test_answers_over_the_cap_score_zero():
    ds, (entry, *_) = _entries("basic_arithmetic", n=1)
    assert score_answer("basic_arithmetic", ds, entry["answer"] + " " * MAX_ANSWER_CHARS, entry) == 0.0
    assert score_answer("basic_arithmetic", ds, None, entry) == 0.0


def test_literal_accepts_data_only():
    assert literal("[[0, 1], [-2, 3.5]]") == [[0, 1], [-2, 3.5]]
    assert literal(" ('a', 'b') ") == ("a", "b")
    for bad in ("__import__('os')", "[x for x in 'ab']", "{1: 2}", "1 + 1", "b'x'", "[" * 300 + "]" * 300, "...",
                "lambda: 1", "'a' * 10**9"):
        with pytest.raises(Unsafe):
            literal(bad)


def test_arithmetic_is_exact_and_bounded():
    assert arithmetic("49*(85 - 1)/14 - 42 - 73") == 179
    assert arithmetic("6/4") == pytest.approx(1.5) and arithmetic("2**-2 + 0.25") == 0.5
    for bad in ("9**9**9**9", "2**65", "2**0.5", "x + 1", "f(1)", "1 if 1 else 2", "[1]", "1 << 9999"):
        with pytest.raises(Unsafe):
            arithmetic(bad)
    with pytest.raises(ZeroDivisionError):
        arithmetic("1/(2-2)")


def test_sympy_text_allows_only_the_task_names_and_small_powers():
    names = {"x", "C"}
    for ok in ("2*(-10*x - 10)**(3/2)/3 + C", "3*Integral(x**3*cos(3*x), x) + C", "E**(2*x) + exp(x) + pi"):
        assert check_sympy_text(ok, names) == ok
    for bad in ("x**99", "x**(x**2)", "__import__('os')", "x.__class__", "y + C", "sin", "sin(x, evaluate=False)",
                "Symbol('x')", "((x**2)**2)**2", "'x'", "x[0]"):
        with pytest.raises(Unsafe):
            check_sympy_text(bad, names)


def test_sympy_text_numbers_are_judged_as_written():
    for ok in ("2.5e3*x", "1e64*x", "3.25E-7 + x", "1_000*x", "0.5*x**2"):
        assert check_sympy_text(ok, {"x"}) == ok
    # Python reads 1e999999999 as inf and 1e-999999999 as 0.0, both short; sympy reads the digits as written.
    for bad in ("1e65*x", "1e999999999", "x - 1e-999999999", "x*1E+99_999", "0." + "0" * 70 + "1*x"):
        with pytest.raises(Unsafe, match="not a plain number"):
            check_sympy_text(bad, {"x"})
