"""Worked solutions for few-shot examples: a short, correct working, then the answer tag.

A tiny model copies the shape of its examples. Shown bare answers (``<answer>12</answer>``) it
guesses; shown the arithmetic first (``4 * 3 = 12``) it does the arithmetic (issue 10: 19/48 ->
42/48 right on one-digit products, same model). So each few-shot answer shows a working built
from the question's own reasoning-gym entry (its expression, numbers, metadata), kept short
enough to fit the node's answer length, and ends with the dataset's own answer string.

Only the node's own examples pass through here (questions it generated itself from its mix),
never a peer's text. Expressions are walked with ``ast`` (no eval); a working that does not
reach the dataset's answer is dropped (``worked_answer`` returns None) and the example falls
back to the bare answer. Hand-written (task knowledge; no library writes worked solutions).
"""

from __future__ import annotations

import ast
import datetime
import math
import re
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any, Callable

from engine.tasks.rewards import tagged

_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
MAX_STEPS = 6  # longer workings do not fit a tiny model's 96 answer tokens; those examples stay bare


def _num(x: Fraction | Decimal) -> str:
    if isinstance(x, Fraction):
        return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"
    return format(x.normalize(), "f") if x == x.to_integral_value() else str(x)


def arithmetic_steps(expression: str, number: Callable[[str], Any] = Fraction) -> tuple[list[str], Any] | None:
    """The steps of an arithmetic expression, one operation each, in evaluation order, and its value.

    ``-9 * -4 + 8`` -> ``["-9 * -4 = 36", "36 + 8 = 44"]``, 44. None if it is not plain arithmetic.
    """
    try:
        tree = ast.parse(expression.replace("×", "*").replace("÷", "/"), mode="eval").body
    except SyntaxError:
        return None
    steps: list[str] = []

    def walk(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return number(str(node.value))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            a, b = walk(node.left), walk(node.right)
            op = type(node.op)
            if op is ast.Div and b == 0:
                raise ZeroDivisionError
            value = a + b if op is ast.Add else a - b if op is ast.Sub else a * b if op is ast.Mult else a / b
            steps.append(f"{_num(a)} {_OPS[op]} {_num(b)} = {_num(value)}")
            return value
        raise ValueError("not plain arithmetic")

    try:
        value = walk(tree)
    except (ValueError, ZeroDivisionError, ArithmeticError):
        return None
    return steps, value


def _arithmetic(entry: dict[str, Any], answer: str) -> str | None:
    steps_value = arithmetic_steps(entry["metadata"]["expression"])
    if steps_value is None:
        return None
    steps, value = steps_value
    if _num(value) != answer.strip() or len(steps) > MAX_STEPS:
        return None
    return ". ".join(steps) + "." if steps else None


def _decimal_arithmetic(entry: dict[str, Any], answer: str) -> str | None:
    # The question ends in "(9.661/4.907) = ?"; the dataset rounds the result to ``prec`` significant digits.
    m = re.search(r"\n(.+?)\s*=\s*\?\s*$", entry["question"])
    prec = re.search(r"maximum of (\d+) significant", entry["question"])
    if m is None or prec is None:
        return None
    with localcontext() as ctx:
        ctx.prec = int(prec.group(1))
        steps_value = arithmetic_steps(m.group(1), Decimal)
    if steps_value is None or not steps_value[0]:
        return None
    steps, value = steps_value
    try:
        if Decimal(answer) != value:
            return None
    except ArithmeticError:
        return None
    return ". ".join(steps) + "."


_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _expand(digits: str, base: int) -> str:
    n = len(digits)
    return " + ".join(f"{_DIGITS.index(d)}*{base}^{n - 1 - i}" if n - 1 - i > 1 else
                      f"{_DIGITS.index(d)}*{base}" if n - 1 - i == 1 else str(_DIGITS.index(d))
                      for i, d in enumerate(digits.lower()))


def _base_conversion(entry: dict[str, Any], answer: str) -> str | None:
    meta = entry["metadata"]
    value, src, dst = meta["decimal_value"], meta["source_base"], meta["target_base"]
    parts = []
    if src != 10:
        parts.append(f"{meta['source_repr']} in base {src} = {_expand(meta['source_repr'], src)} = {value}")
    if dst != 10:
        parts.append(f"{value} = {_expand(answer, dst)}, so in base {dst} it is {answer}")
    return ". ".join(parts) + "." if parts else None


def _leap_rule(year: int) -> str:
    if year % 400 == 0:
        return f"{year} is divisible by 400, so it is a leap year"
    if year % 100 == 0:
        return f"{year} is divisible by 100 but not by 400, so it is not a leap year"
    if year % 4 == 0:
        return f"{year} is divisible by 4 and not by 100, so it is a leap year"
    return f"{year} is not divisible by 4, so it is not a leap year"


def _calendar(entry: dict[str, Any], answer: str) -> str | None:
    meta = entry["metadata"]
    if meta.get("task") == "is_leap_year":
        return _leap_rule(int(meta["year"])) + "."
    if meta.get("task") in ("count_days", "count_business_days") and "start_date" in meta:
        a = datetime.date.fromisoformat(meta["start_date"])
        b = datetime.date.fromisoformat(meta["end_date"])
        days = (b - a).days + 1
        if meta["task"] == "count_days":
            return f"From {a:%B %d} to {b:%B %d}, counting both, is {days} days."
        return f"From {a:%A %B %d} to {b:%A %B %d} is {days} days; leaving out Saturdays and Sundays leaves {answer}."
    return None


def _fraction(entry: dict[str, Any], answer: str) -> str | None:
    meta = entry["metadata"]
    a, b = meta["numerator"], meta["denominator"]
    g = math.gcd(a, b)
    if g == 1:
        return f"gcd({a}, {b}) = 1, so {a}/{b} is already in lowest terms."
    return f"gcd({a}, {b}) = {g}. {a} / {g} = {a // g} and {b} / {g} = {b // g}."


def _binary_matrix(entry: dict[str, Any], answer: str) -> str | None:
    return "Each 0 stays 0; each 1 becomes the number of steps (up, down, left, right) to the nearest 0."


def _arc_1d(entry: dict[str, Any], answer: str) -> str | None:
    name = entry["metadata"].get("task_name")
    return f"The rule in the examples: {name.replace('_', ' ')}. Applying it to the test input:" if name else None


def _bf(entry: dict[str, Any], answer: str) -> str | None:
    if not answer or len(answer) > 12:
        return None
    return "The code prints the characters with codes " + " ".join(str(ord(c)) for c in answer) + "."


def _propositional(entry: dict[str, Any], answer: str) -> str | None:
    premises = entry["metadata"].get("premises") or []
    return "The premises are " + "; ".join(premises) + ". A statement that follows from them:" if premises else None


def _legs(entry: dict[str, Any], answer: str) -> str | None:
    from reasoning_gym.arithmetic.leg_counting import ANIMALS  # legs per animal, as the dataset counts them

    animals: dict[str, int] = entry["metadata"]["animals"]
    parts = [f"{n} {name}: {n} * {ANIMALS[name]} = {n * ANIMALS[name]}" for name, n in animals.items()]
    total = sum(n * ANIMALS[name] for name, n in animals.items())
    if str(total) != answer.strip() or len(parts) > MAX_STEPS:
        return None
    if len(parts) > 1:
        parts.append(" + ".join(str(n * ANIMALS[name]) for name, n in animals.items()) + f" = {total}")
    return ". ".join(parts) + "."


def _gcd(entry: dict[str, Any], answer: str) -> str | None:
    numbers = [int(x) for x in entry["metadata"]["numbers"]]
    if len(numbers) != 2 or min(numbers) < 1:
        return None
    a, b = max(numbers), min(numbers)
    steps = []
    while b and len(steps) <= MAX_STEPS:  # Euclid: gcd(a, b) = gcd(b, a mod b)
        steps.append(f"{a} mod {b} = {a % b}")
        a, b = b, a % b
    if b or str(a) != answer.strip():
        return None
    return ". ".join(steps) + f", so the GCD is {a}."


def _equation(entry: dict[str, Any], answer: str) -> str | None:
    # Two-term equations only: "x + 5 = 12", "5 - x = 3", "x - 4 = 2", "3 + x = 9".
    var = re.escape(entry["metadata"]["variable"])
    eq = entry["metadata"]["equation"].replace(" ", "")
    for pattern, solve in (
        (rf"^{var}\+(\d+)=(-?\d+)$", lambda a, b: (f"{b} - {a}", b - a)),
        (rf"^(\d+)\+{var}=(-?\d+)$", lambda a, b: (f"{b} - {a}", b - a)),
        (rf"^{var}-(\d+)=(-?\d+)$", lambda a, b: (f"{b} + {a}", b + a)),
        (rf"^(\d+)-{var}=(-?\d+)$", lambda a, b: (f"{a} - {b}", a - b)),
    ):
        m = re.match(pattern, eq)
        if m:
            text, value = solve(int(m.group(1)), int(m.group(2)))
            name = entry["metadata"]["variable"]
            return f"{name} = {text} = {value}." if str(value) == answer.strip() else None
    return None


WORKERS: dict[str, Callable[[dict[str, Any], str], str | None]] = {
    "basic_arithmetic": _arithmetic,
    "chain_sum": _arithmetic,
    "decimal_arithmetic": _decimal_arithmetic,
    "base_conversion": _base_conversion,
    "calendar_arithmetic": _calendar,
    "fraction_simplification": _fraction,
    "binary_matrix": _binary_matrix,
    "arc_1d": _arc_1d,
    "bf": _bf,
    "propositional_logic": _propositional,
    "leg_counting": _legs,
    "gcd": _gcd,
    "simple_equations": _equation,
}


def example_answer(dataset: str, entry: dict[str, Any]) -> str:
    """The answer string an example shows: the dataset's answer, or (propositional logic, which
    scores from metadata) its metadata's example conclusion; "" when there is none."""
    answer = entry.get("answer") or ""
    if not answer and dataset == "propositional_logic":
        answer = entry.get("metadata", {}).get("example_answer") or ""
    return str(answer)


def worked_answer(dataset: str, entry: dict[str, Any]) -> str | None:
    """An example's assistant turn: a short working, then the tagged answer; None if this task or
    entry has no working (the caller shows the bare answer then)."""
    answer = example_answer(dataset, entry)
    worker = WORKERS.get(dataset)
    if worker is None or not answer:
        return None
    try:
        working = worker(entry, answer)
    except (KeyError, TypeError, ValueError, AttributeError):  # metadata of another reasoning-gym version
        return None
    if not working:
        return None
    return f"{working} {tagged(answer)}"
