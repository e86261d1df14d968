"""reasoning-gym scoring without running anyone's text as code, and with bounded work.

The first wall (``engine.sandbox.workers`` is the second). Every answer, a peer's or our own model's,
is scored here: at most ``MAX_ANSWER_CHARS`` characters, and through a safe equivalent where
reasoning-gym's own ``score_answer`` would evaluate or loop on the answer. Survey of
reasoning-gym 0.1.19 (every ``score_answer`` and the helpers it calls; see docs/SECURITY.md), re-checked for
0.1.25, the pinned version (engine/sandbox/survey.json; docs/SECURITY.md "Pinned and surveyed"):

=========================  ===============================================  ==========================
dataset                    the problem                                      here
=========================  ===============================================  ==========================
binary_matrix, n_queens,   ``eval(answer)``: runs any Python                same code, ``literal``
spiral_matrix,                                                              (``ast.literal_eval`` of a
string_insertion                                                            size-checked tree)
countdown, puzzle24        sympy ``parse_expr`` (an ``eval``), and          ``arithmetic``: a small
                           ``9**9**9**9`` never ends                        evaluator of our own
polynomial_multiplication, sympy ``parse_expr`` (an ``eval``)               ``check_sympy_text`` first:
simple_integration,                                                         only numbers, the task's
intermediate_integration                                                    names, + - * / ** and a few
                                                                            functions; powers bounded
coin_flip                  ``Fraction("1e999999999")`` takes minutes        exponent clamped (same
                                                                            float, same score)
rubiks_cube                ``"R999999999"`` builds a list that long         counts reduced mod 4
rush_hour                  ``"A+999999999"`` loops that many steps          steps clamped to the board
propositional_logic        a truth table over every name in the answer      at most 2 names beyond the
                           (2**n rows), a quadratic recursive parser        question's, 200 characters
simple_integration,        ``simplify`` exponential in nested or distinct   at most 6 calls, 2 deep,
intermediate_integration   function calls                                   160 nodes
=========================  ===============================================  ==========================

All other scorers do work linear in the answer's length and nothing else; the length cap bounds
them. Behind all of it, every answer's scoring gets ``ANSWER_CPU_S`` of CPU (``cpu_limit``), whatever
the dataset: sympy's ``simplify`` has no useful bound in an expression's size (issue 23). Every safe scorer gives the original's
score on every answer an honest model writes (tests compare them on real entries); answers
that are code score what the original gives an answer it cannot read.

Hand-written: no library scores reasoning-gym answers safely.
"""

from __future__ import annotations

import ast
import operator
import re
import signal
import threading
from contextlib import contextmanager
from fractions import Fraction
from typing import Any, Callable, Iterator

MAX_ANSWER_CHARS = 4096  # a 30 x 30 ARC grid, the largest honest answer, is ~1,800
MAX_LITERAL_NODES = 4096
MAX_EXPR_NODES = 512
MAX_NUMBER_DIGITS = 64  # digits of one number in an expression
MAX_POWER = 64  # |exponent| of a power in an expression
MAX_BITS = 8192  # size of any intermediate integer in ``arithmetic``

# CPU seconds one answer's scoring may take: the slowest honest answer measured (reasoning-gym's own answer,
# 0.22 s, intermediate_integration; every other task of the presets under 0.01 s) with room for slower machines.
# Past it the answer scores 0 (docs/SECURITY.md, "Bounded cost per sender").
ANSWER_CPU_S = 1.0

Score = Callable[[Any, str, dict[str, Any]], float]


class OverBudget(BaseException):
    """The CPU timer of ``cpu_limit`` fired. A BaseException: a scorer's ``except Exception`` does not swallow it."""


@contextmanager
def cpu_limit(seconds: float) -> Iterator[None]:
    """Raise OverBudget in the block once it has used ``seconds`` of this process's CPU time (user + system).

    POSIX main thread only (ITIMER_PROF, SIGPROF); elsewhere (Windows, other threads) a no-op and the sandbox's
    per-job timeout is the bound. The timer fires again every 50 ms after that, so a scorer whose bare
    ``except:`` swallows the first one is stopped too.
    """
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise OverBudget

    old = signal.signal(signal.SIGPROF, fire)
    signal.setitimer(signal.ITIMER_PROF, max(seconds, 1e-3), 0.05)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


class Unsafe(ValueError):
    """An answer this module refuses to evaluate; the scorer treats it as unreadable."""


# --- literals (eval-based scorers) -----------------------------------------------------------

_LITERAL_NODES = (ast.Expression, ast.Constant, ast.List, ast.Tuple, ast.UnaryOp, ast.USub, ast.UAdd, ast.Load)


def literal(text: str) -> Any:
    """``eval(text)`` for answers that are Python literals (lists, numbers, strings); Unsafe otherwise."""
    if len(text) > MAX_ANSWER_CHARS:
        raise Unsafe("answer too long")
    try:
        tree = ast.parse(text.strip(), mode="eval")  # the parser caps nesting itself (SyntaxError)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise Unsafe(f"not a literal: {type(exc).__name__}") from None
    for n, node in enumerate(ast.walk(tree)):
        if n > MAX_LITERAL_NODES or not isinstance(node, _LITERAL_NODES):
            raise Unsafe("not a plain literal")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str)):
            raise Unsafe("not a plain literal")
    return ast.literal_eval(tree)


# --- arithmetic (countdown, puzzle24) ----------------------------------------------------------

_BINOPS: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
}


def arithmetic(text: str) -> Fraction:
    """The exact value of + - * / ** over numbers, as sympy's ``parse_expr`` computes it; Unsafe otherwise.

    Division is exact (sympy makes ``6/4`` the rational 3/2); decimals are exact too.
    """
    tree, _ = _parse_bounded(text, "not arithmetic")
    return _value(tree.body)


def _parse_bounded(text: str, what: str) -> tuple[ast.Expression, list[ast.AST]]:
    """Python's parser on a capped answer, and its nodes, refused when too long or too large."""
    if len(text) > MAX_ANSWER_CHARS:
        raise Unsafe("answer too long")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise Unsafe(f"{what}: {type(exc).__name__}") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_EXPR_NODES:
        raise Unsafe("expression too large")
    return tree, nodes


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        if len(str(node.value)) > MAX_NUMBER_DIGITS or node.value in (float("inf"), float("-inf")) \
                or node.value != node.value:
            raise Unsafe("number too long")
        return Fraction(repr(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Div) and b == 0:
            raise ZeroDivisionError("division by zero")
        return _bounded(_BINOPS[type(node.op)](a, b))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        base, exp = _value(node.left), _value(node.right)
        if exp.denominator != 1 or abs(exp) > MAX_POWER:
            raise Unsafe("power out of range")
        if base == 0 and exp < 0:
            raise ZeroDivisionError("zero to a negative power")
        return _bounded(base ** int(exp))
    raise Unsafe(f"not arithmetic: {type(node).__name__}")


def _bounded(v: Fraction) -> Fraction:
    if v.numerator.bit_length() > MAX_BITS or v.denominator.bit_length() > MAX_BITS:
        raise Unsafe("number too large")
    return v


# --- sympy expressions (polynomials, integrals) -------------------------------------------------

# Functions an honest integral may use (reasoning-gym's answers and prompt use these).
SYMPY_FUNCTIONS = frozenset({
    "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "sinh", "cosh", "tanh",
    "exp", "log", "ln", "sqrt", "Abs", "Integral",
})
SYMPY_CONSTANTS = frozenset({"E", "pi"})
_SYMPY_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Call, ast.Load,
                ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub, ast.UAdd)


def check_sympy_text(text: str, names: set[str], functions: frozenset[str] = SYMPY_FUNCTIONS) -> str:
    """The text, if it is an arithmetic expression sympy can read safely; Unsafe otherwise.

    Allowed: numbers (at most MAX_NUMBER_DIGITS digits), the given variable names, E and pi,
    calls of ``functions`` by name, + - * / and ``**`` whose exponent is a number of at most
    MAX_POWER (or any allowed expression when the base is E), powers nested at most twice.
    Python's own parser decides the structure: the same tokens sympy's ``parse_expr`` reads,
    which then can only build an expression of those names and numbers.
    """
    tree, nodes = _parse_bounded(text, "not an expression")
    source = text.strip()  # what _parse_bounded parsed: the nodes' offsets are into it
    called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
    for node in nodes:
        if not isinstance(node, _SYMPY_NODES):
            raise Unsafe(f"not allowed: {type(node).__name__}")
        if isinstance(node, ast.Constant) and not _plain_number(node, source):
            raise Unsafe("not a plain number")
        if isinstance(node, ast.Name) and node.id not in names | SYMPY_CONSTANTS and node.id not in functions:
            raise Unsafe(f"unknown name {node.id!r}")
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in functions) or node.keywords:
                raise Unsafe("not an allowed function")
        elif isinstance(node, ast.Name) and node.id in functions and id(node) not in called:
            raise Unsafe("a function used as a value")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            base_is_e = isinstance(node.left, ast.Name) and node.left.id == "E"
            if not base_is_e:
                try:
                    exp = _value(node.right)
                except (Unsafe, ZeroDivisionError):
                    raise Unsafe("exponent is not a small number") from None
                if abs(exp) > MAX_POWER:
                    raise Unsafe("exponent too large")
            if _pow_depth(node) > 2:
                raise Unsafe("powers nested too deep")
    return text


def _plain_number(node: ast.Constant, source: str) -> bool:
    """An int or float literal of at most MAX_NUMBER_DIGITS characters whose exponent is at most MAX_POWER.

    Judged on the literal as written, not Python's value of it: sympy reads the text itself, and Python
    makes ``1e999999999`` inf and ``1e-999999999`` 0.0, where sympy makes a Float whose exact value has a
    billion digits; turning that into a rational runs in C for minutes, past any per-answer timer.
    """
    if type(node.value) not in (int, float):
        return False
    literal = (ast.get_source_segment(source, node) or repr(node.value)).replace("_", "")
    exponent = re.search(r"[eE]([+-]?\d+)$", literal)
    return len(literal) <= MAX_NUMBER_DIGITS and (exponent is None or abs(int(exponent.group(1))) <= MAX_POWER)


def _pow_depth(node: ast.AST) -> int:
    below = max((_pow_depth(c) for c in ast.iter_child_nodes(node)), default=0)
    return below + (1 if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) else 0)


# --- the scorers that need care -------------------------------------------------------------------

def _binary_matrix(ds: Any, answer: str, entry: dict[str, Any]) -> float:
    oracle = entry["answer"]
    if answer == oracle:
        return 1.0
    try:
        return 0.1 if ds._matrix_to_str(literal(answer)) == oracle else 0.0
    except Exception:  # noqa: BLE001 - as the original: anything unreadable scores 0
        return 0.0


def _spiral_matrix(ds: Any, answer: str, entry: dict[str, Any]) -> float:
    oracle = entry["answer"].strip()
    if not answer:
        return 0.0
    answer = answer.strip()
    if answer == oracle:
        return 1.0
    try:
        return 0.1 if " ".join(str(item) for item in literal(answer)) == oracle else 0.0
    except Exception:  # noqa: BLE001
        return 0.0


def _string_insertion(ds: Any, answer: str, entry: dict[str, Any]) -> float:
    oracle = entry["answer"]
    if answer == oracle:
        return 1.0
    try:
        return 0.1 if "".join(literal(answer)) == oracle else 0.0
    except Exception:  # noqa: BLE001
        return 0.0


def _n_queens(ds: Any, answer: str, entry: dict[str, Any]) -> float:
    valid = entry["metadata"]["valid_answers"]
    if answer in valid:
        return 1.0
    try:
        return 0.5 if ds._board_to_string(literal(answer)) in valid else 0.0
    except Exception:  # noqa: BLE001
        return 0.0


def _countdown(ds: Any, answer: str, entry: dict[str, Any]) -> float:
    from reasoning_gym.games.countdown import _extract_ints

    if not answer.strip():
        return 0.01
    try:
        value = float(arithmetic(answer))
        if sorted(_extract_ints(answer)) != sorted(entry["metadata"]["numbers"]):
            return 0.05
        return 1.0 if abs(value - entry["metadata"]["target"]) <= 1e-6 + 1e-5 * abs(entry["metadata"]["target"]) else 0.05
    except Exception:  # noqa: BLE001 - the original's catch-all: 0.01
        return 0.01


def _puzzle24(ds: Any, answer: str, entry: dict[str, Any]) -> float:
    try:
        answer = answer.strip()
        solved = int(arithmetic(answer)) == 24  # int() truncates, as int() of a sympy Rational does
        used = [int(n) for n in re.findall(r"\b\d+\b", answer)]
        if len(used) != 4 or any(n > ds.config.max_value or n < ds.config.min_value for n in used):
            return 0.01
        return 1.0 if solved else 0.01
    except Exception:  # noqa: BLE001
        return 0.01


def _polynomial_multiplication(ds: Any, answer: str, entry: dict[str, Any]) -> float:
    try:
        check_sympy_text(answer, set(entry["metadata"]["variables"]), functions=frozenset())
    except Unsafe:
        return 0.0
    return ds.score_answer(answer, entry)


# What sympy's simplify of an integral's derivative costs grows fast in nested and distinct function
# calls (``sin(sin(...sin(x)))`` 8 deep, or 8 different functions multiplied: 5 s and more) and in the
# expression's size. reasoning-gym's own answers (500 of each integration task): at most 4 calls,
# nested at most 2 deep, 64 nodes. Bounds at twice that or more; beyond them an answer scores 0.
MAX_INTEGRAL_CALLS = 6
MAX_INTEGRAL_CALL_DEPTH = 2
MAX_INTEGRAL_NODES = 160


def check_integral_text(text: str, names: set[str]) -> str:
    """``check_sympy_text``, and at most MAX_INTEGRAL_CALLS calls nested at most MAX_INTEGRAL_CALL_DEPTH deep
    in at most MAX_INTEGRAL_NODES nodes; Unsafe otherwise."""
    check_sympy_text(text, names)
    tree, nodes = _parse_bounded(text, "not an expression")
    if len(nodes) > MAX_INTEGRAL_NODES:
        raise Unsafe("expression too large for an integral")
    if sum(isinstance(n, ast.Call) for n in nodes) > MAX_INTEGRAL_CALLS:
        raise Unsafe("too many function calls")
    if _call_depth(tree) > MAX_INTEGRAL_CALL_DEPTH:
        raise Unsafe("function calls nested too deep")
    return text


def _call_depth(node: ast.AST) -> int:
    below = max((_call_depth(c) for c in ast.iter_child_nodes(node)), default=0)
    # E ** (...) is exp(...): sympy nests it as a call
    is_call = isinstance(node, ast.Call) or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow)
                                             and isinstance(node.left, ast.Name) and node.left.id == "E")
    return below + (1 if is_call else 0)


def _integration(ds: Any, answer: str, entry: dict[str, Any]) -> float:
    try:
        check_integral_text(answer, {entry["metadata"]["variable"], "C"})
    except Unsafe:
        return 0.0
    return ds.score_answer(answer, entry)


# propositional_logic builds a truth table over every name an answer uses (2**n rows: 16 names take
# seconds, 18 minutes), and its parser rescans the rest of the text at every operator (quadratic,
# recursion as deep as the operators). An honest answer names only the question's variables (at most
# 6 under ANY_TASK_CAPS) in a short formula: reasoning-gym's premises are at most ~60 characters.
MAX_LOGIC_CHARS = 200
MAX_LOGIC_EXTRA_NAMES = 2  # names beyond the question's variables (a wrong answer may still name some)
MAX_LOGIC_OPERATORS = 48
_LOGIC_OPERATORS = "∧∨¬→↔"


def _propositional_logic(ds: Any, answer: str, entry: dict[str, Any]) -> float:
    from reasoning_gym.logic.propositional_logic import Expression

    if len(answer) > MAX_LOGIC_CHARS or sum(answer.count(c) for c in _LOGIC_OPERATORS) > MAX_LOGIC_OPERATORS:
        return 0.0
    try:
        expr = Expression.from_string(answer)
    except (ValueError, RecursionError):  # the original: 0 for what it cannot read
        return 0.0
    names = _logic_names(expr)
    if names is None or len(names - set(entry["metadata"]["variables"])) > MAX_LOGIC_EXTRA_NAMES:
        return 0.0
    return ds.score_answer(answer, entry)


def _logic_names(expr: Any) -> set[str] | None:
    """The variable names of a parsed formula (its leaves); None where it is not one."""
    out: set[str] = set()
    stack = [expr]
    while stack:
        e = stack.pop()
        if e.operator is None:
            if not isinstance(e.left, str):
                return None
            out.add(e.left)
        else:
            stack += [c for c in (e.left, e.right) if c is not None and hasattr(c, "operator")]
    return out


_EXPONENT = re.compile(r"([-+]?)(\d+(?:_\d+)*)(\s*)")
_MAX_EXP = 10_000  # beyond this any Fraction -> float is 0.0 or an overflow, as for the exponent itself


def _coin_flip(ds: Any, answer: str, entry: dict[str, Any]) -> float:
    # Fraction("1e999999999") computes 10**999999999. Same value as a float once the exponent
    # passes any mantissa the length cap allows: clamp it, then score as the original does.
    text = answer.replace(",", "")
    cut = max(text.rfind("e"), text.rfind("E")) + 1
    m = _EXPONENT.fullmatch(text, cut) if cut else None
    if m and int(m[2].replace("_", "")) > _MAX_EXP:
        text = f"{text[:cut]}{m[1]}{_MAX_EXP}{m[3]}"
    return ds.score_answer(text, entry)


_MOVE_COUNT = re.compile(r"^([^\d]*)(\d*)$")


def _rubiks_cube(ds: Any, answer: str, entry: dict[str, Any]) -> float:
    # expand_moves repeats a move as often as its count says. Every face turn has order 4, so a
    # count n >= 4 turns the cube as n mod 4 + 4 does (kept >= 1 so an invalid move still fails).
    def reduce(move: str) -> str:
        m = _MOVE_COUNT.fullmatch(move)
        if not m or not m[2] or int(m[2]) < 8:
            return move
        return f"{m[1]}{int(m[2]) % 4 + 4}"

    return ds.score_answer(" ".join(reduce(w) for w in answer.split()), entry)


_RUSH_MOVE = re.compile(r"([A-Z])([+-])(\d+)")
_RUSH_MAX_STEPS = 6  # the board is 6 x 6: past 6 steps a piece is against a wall or a car


def _rush_hour(ds: Any, answer: str, entry: dict[str, Any]) -> float:
    clamped = _RUSH_MOVE.sub(lambda m: f"{m[1]}{m[2]}{min(int(m[3]), _RUSH_MAX_STEPS)}", answer)
    return ds.score_answer(clamped, entry)


SAFE_SCORERS: dict[str, Score] = {
    "binary_matrix": _binary_matrix,
    "spiral_matrix": _spiral_matrix,
    "string_insertion": _string_insertion,
    "n_queens": _n_queens,
    "countdown": _countdown,
    "puzzle24": _puzzle24,
    "polynomial_multiplication": _polynomial_multiplication,
    "simple_integration": _integration,
    "intermediate_integration": _integration,
    "propositional_logic": _propositional_logic,
    "coin_flip": _coin_flip,
    "rubiks_cube": _rubiks_cube,
    "rush_hour": _rush_hour,
}


def capped(answer: str | None) -> str | None:
    """An extracted answer as sent to be scored: None (scores 0) when longer than MAX_ANSWER_CHARS."""
    return answer if answer is not None and len(answer) <= MAX_ANSWER_CHARS else None


def score_answer(dataset: str, ds: Any, answer: str | None, entry: dict[str, Any],
                 cpu_s: float = ANSWER_CPU_S) -> float:
    """reasoning-gym's score for one extracted answer, computed safely in at most ``cpu_s`` CPU seconds (0 past
    them); raises what the scorer raises."""
    if answer is None or len(answer) > MAX_ANSWER_CHARS:
        return 0.0
    safe = SAFE_SCORERS.get(dataset)
    try:
        with cpu_limit(cpu_s):
            return safe(ds, answer, entry) if safe is not None else ds.score_answer(answer, entry)
    except OverBudget:
        return 0.0
