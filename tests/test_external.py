"""External-group selection and the dead-slot budget, as pure functions on hand-computed cases."""

from __future__ import annotations

import random

import pytest

from engine.sharing.selection import (Candidate, candidates_to_sample, dead_slots, rank, update_task_accuracy,
                             usefulness)

CANDS = [
    Candidate("a", success=0.0, reward_mean=0.10, spread=True),   # 0: spread from the format bonus only
    Candidate("a", success=0.5, reward_mean=0.55, spread=True),   # 1
    Candidate("b", success=0.25, reward_mean=0.30, spread=True),  # 2
    Candidate("b", success=1.0, reward_mean=1.10, spread=False),  # 3: no spread
    Candidate("c", success=0.75, reward_mean=0.80, spread=True),  # 4
]


def test_usefulness_hand_computed():
    assert usefulness(0.5, 0.0) == pytest.approx(1.0)
    assert usefulness(0.25, 0.5) == pytest.approx(0.75 * 0.75)  # 4 * .25 * .75 = .75; 1 - .5/2 = .75
    assert usefulness(0.75, 1.0) == pytest.approx(0.375)
    assert usefulness(0.0, 0.0) == 0.0 and usefulness(1.0, 0.0) == 0.0


def test_top_ranks_by_mean_reward_among_groups_with_spread():
    assert rank(CANDS, "top", {}, random.Random(0)) == [4, 1, 2, 0]


def test_uniform_is_every_group_with_spread_in_random_order():
    order = rank(CANDS, "uniform", {}, random.Random(0))
    assert sorted(order) == [0, 1, 2, 4]
    orders = {tuple(rank(CANDS, "uniform", {}, random.Random(s))) for s in range(20)}
    assert len(orders) > 1  # really shuffled


def test_useful_keeps_success_strictly_inside_and_prefers_half_and_failed_tasks():
    # usefulness: 1 -> 1.0 * (1 - .5/2) = .75 (a unknown: .5); 2 -> .75 * (1 - .2/2) = .675; 4 -> .75 * (1 - 1/2) = .375
    acc = {"b": 0.2, "c": 1.0}
    assert rank(CANDS, "useful", acc, random.Random(0)) == [1, 2, 4]
    # task a mastered, b failed: b's 0.25 group (.75 * 1 = .75) beats a's 0.5 group (1 * .5 = .5)
    assert rank(CANDS, "useful", {"a": 1.0, "b": 0.0, "c": 1.0}, random.Random(0)) == [2, 1, 4]


def test_rare_keeps_useful_s_groups_and_puts_the_lowest_success_first():
    assert rank(CANDS, "rare", {}, random.Random(0)) == [2, 1, 4]  # 0.25, 0.5, 0.75; 0 (format only) and 3 out
    same = [Candidate("a", 0.25, 0.3, True), Candidate("b", 0.25, 0.3, True), Candidate("c", 0.25, 0.3, True, distance=1)]
    # equal success: the failed task first, then the nearer level (as useful)
    assert rank(same, "rare", {"a": 1.0, "b": 0.0}, random.Random(0)) == [1, 0, 2]


def test_unknown_rule_is_an_error():
    with pytest.raises(ValueError, match="unknown external selection"):
        rank(CANDS, "best", {}, random.Random(0))


def test_dead_slots():
    assert dead_slots([True, False, False, True], 4, 8) == 2  # 2 own with spread + 4 external: 2 short
    assert dead_slots([False] * 8, 0, 8) == 8
    assert dead_slots([True] * 4, 4, 8) == 0
    assert dead_slots([True] * 4, 6, 8) == 0  # never negative


def test_candidates_to_sample():
    assert candidates_to_sample(4, 4, "uniform", False) == 4
    assert candidates_to_sample(4, 4, "uniform", True) == 16
    assert candidates_to_sample(4, 4, "useful", False) == 16
    assert candidates_to_sample(8, 0, "useful", True) == 0


def test_task_accuracy_running_average():
    acc = update_task_accuracy({}, {"a": 0.5})
    assert acc == {"a": 0.5}
    acc = update_task_accuracy(acc, {"a": 1.0, "b": 0.0})
    assert acc == {"a": pytest.approx(0.7 * 0.5 + 0.3 * 1.0), "b": 0.0}
