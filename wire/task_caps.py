"""Size caps on task settings: the largest settings a node generates for a peer's spec, its own frontier, or a
swarm manifest's task mix.

A contract shared by node and relay, so it lives in ``wire``: used by the engine's ``questions.admit`` (a peer's
spec of a task outside the node's mix, with ``external_any_task``) and ``frontier`` (the highest level a task's
ladder reaches), and by ``wire.manifest`` (a swarm's task mix, checked by the relay at start and by every node
that joins). Pure data and one check; no reasoning-gym. ``engine/tasks/caps.py`` re-exports it.
"""

from __future__ import annotations

from typing import Any, Callable

# With ``external_any_task``: the datasets a node accepts outside its own mix, and for each the
# settings it accepts with their largest value (a number) or None (a flag, a word or a short
# list of words). Sized so that one item takes milliseconds to generate and to score; every
# other dataset or setting is refused before reasoning-gym sees it. A frontier ladder
# (engine/tasks/frontier.py) ends below them too, and has no levels for a dataset not listed.
ANY_TASK_CAPS: dict[str, dict[str, float | None]] = {
    "arc_1d": {"min_size": 30, "max_size": 30, "num_train": 5},
    "base_conversion": {"min_base": 36, "max_base": 36, "min_value": 10**6, "max_value": 10**6},
    "basic_arithmetic": {"min_terms": 8, "max_terms": 8, "min_digits": 6, "max_digits": 6, "operators": None,
                         "allow_parentheses": None, "allow_negation": None, "format_style": None,
                         "whitespace": None},
    "bf": {"difficulty": 2},  # difficulty 3 takes seconds per item
    "binary_matrix": {"min_n": 12, "max_n": 12, "p_zero": 1.0},
    "calendar_arithmetic": {"year": 9999, "tasks": None, "offset_upper_bound": 1000, "leap_year_range": 1000},
    "chain_sum": {"min_terms": 8, "max_terms": 8, "min_digits": 6, "max_digits": 6, "allow_negation": None},
    "decimal_arithmetic": {"min_num_decimal_places": 6, "max_num_decimal_places": 6, "min_terms": 8,
                           "max_terms": 8, "precision": 28},
    "gcd": {"min_numbers": 5, "max_numbers": 5, "min_value": 10**5, "max_value": 10**5},
    "fraction_simplification": {"min_value": 10**4, "max_value": 10**4, "min_factor": 1000, "max_factor": 1000,
                                "styles": None},
    "propositional_logic": {"min_vars": 6, "max_vars": 6, "min_statements": 6, "max_statements": 6,
                            "min_complexity": 4, "max_complexity": 4},
}
MAX_LIST_ITEMS = 8
MAX_WORD_CHARS = 32

# Settings inside the caps whose generator never ends (found by timing random settings within ANY_TASK_CAPS,
# reasoning-gym 0.1.25; docs/SECURITY.md "Bounded cost per sender"): refused before reasoning-gym sees them.
# Anything else slow is cut by the sandbox's generation budget (engine.sandbox.workers.GENERATION_CPU_S).
# - base_conversion draws a target base until it differs from the source base: one base only loops.
# - calendar_arithmetic draws a date until it is not January 1: offset_upper_bound 0 loops.
ANY_TASK_RULES: dict[str, Callable[[dict[str, Any]], bool]] = {
    "base_conversion": lambda c: c.get("max_base", 16) > c.get("min_base", 2),
    "calendar_arithmetic": lambda c: c.get("offset_upper_bound", 100) >= 1,
}


def config_within_caps(dataset: str, config: dict[str, Any]) -> bool:
    """True if every setting is one ``ANY_TASK_CAPS`` lists for the dataset, within its cap, and the
    settings together are not ones whose generator never ends (``ANY_TASK_RULES``)."""
    caps = ANY_TASK_CAPS.get(dataset)
    rule = ANY_TASK_RULES.get(dataset)
    return (caps is not None and all(name in caps and _within(value, caps[name]) for name, value in config.items())
            and (rule is None or rule(config)))


def _within(value: Any, cap: float | None) -> bool:
    if cap is not None:  # a number, 0..cap (bool is an int in Python: not a number here)
        return type(value) in (int, float) and 0 <= value <= cap
    if isinstance(value, list):
        return len(value) <= MAX_LIST_ITEMS and all(_within(v, None) and not isinstance(v, list) for v in value)
    return value is None or isinstance(value, bool) or (isinstance(value, str) and len(value) <= MAX_WORD_CHARS)
