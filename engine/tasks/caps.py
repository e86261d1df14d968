"""Size caps on task settings: the largest settings a node generates for a peer's spec or its own frontier.

Used by ``questions.admit`` (a peer's spec of a task outside the node's mix, with ``external_any_task``)
and by ``frontier`` (the highest level a task's ladder reaches). Pure data and one check; no reasoning-gym.
"""

from __future__ import annotations

from typing import Any

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


def config_within_caps(dataset: str, config: dict[str, Any]) -> bool:
    """True if every setting is one ``ANY_TASK_CAPS`` lists for the dataset, within its cap."""
    caps = ANY_TASK_CAPS.get(dataset)
    return caps is not None and all(name in caps and _within(value, caps[name]) for name, value in config.items())


def _within(value: Any, cap: float | None) -> bool:
    if cap is not None:  # a number, 0..cap (bool is an int in Python: not a number here)
        return type(value) in (int, float) and 0 <= value <= cap
    if isinstance(value, list):
        return len(value) <= MAX_LIST_ITEMS and all(_within(v, None) and not isinstance(v, list) for v in value)
    return value is None or isinstance(value, bool) or (isinstance(value, str) and len(value) <= MAX_WORD_CHARS)
