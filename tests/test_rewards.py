from __future__ import annotations

import reasoning_gym
import pytest

from engine.tasks.rewards import extract_answer, is_well_formed, score_completion, task_score


@pytest.fixture(scope="module")
def arith():
    ds = reasoning_gym.create_dataset("basic_arithmetic", seed=3, size=10)
    entry = ds[0]
    return ds, entry


def test_extract_takes_the_last_tag():
    assert extract_answer("<answer>1</answer> no wait <answer> 2 </answer>") == "2"
    assert extract_answer("no tag") is None
    assert extract_answer("<answer>unclosed") is None
    assert extract_answer("<answer>multi\nline</answer>") == "multi\nline"


def test_well_formed_needs_exactly_one_non_empty_tag():
    assert is_well_formed("x = 3\n<answer>3</answer>")
    assert not is_well_formed("<answer></answer>")
    assert not is_well_formed("<answer>1</answer><answer>2</answer>")
    assert not is_well_formed("<answer>1</answer> <answer>")
    assert not is_well_formed("3")


def test_right_wrong_missing(arith):
    ds, entry = arith
    right = f"<answer>{entry['answer']}</answer>"
    s = score_completion(ds, entry, right, format_bonus=0.1)
    assert s.correct and s.well_formed and s.task_score == 1.0 and s.reward == pytest.approx(1.1)
    wrong = score_completion(ds, entry, "<answer>123456789</answer>", format_bonus=0.1)
    assert not wrong.correct and wrong.task_score == 0.0 and wrong.reward == pytest.approx(0.1)
    missing = score_completion(ds, entry, entry["answer"], format_bonus=0.1)
    assert missing.reward == 0.0 and not missing.well_formed


def test_several_tags_score_the_last_but_get_no_format_bonus(arith):
    ds, entry = arith
    text = f"<answer>0</answer> I mean <answer>{entry['answer']}</answer>"
    s = score_completion(ds, entry, text, format_bonus=0.5)
    assert s.correct and not s.well_formed and s.reward == 1.0


def test_partial_credit_comes_from_reasoning_gym():
    ds = reasoning_gym.create_dataset("fraction_simplification", seed=1, size=5)
    entry = ds[0]
    num, den = entry["answer"].split("/")
    unreduced = f"<answer>{int(num) * 2}/{int(den) * 2}</answer>"
    score = task_score(ds, entry, unreduced)
    assert 0.0 < score < 1.0


def test_no_tag_scores_zero_even_where_the_dataset_pays_for_none():
    ds = reasoning_gym.create_dataset("fraction_simplification", seed=1, size=5)
    entry = ds[0]
    assert ds.score_answer(None, entry) > 0  # the courtesy credit we refuse
    assert task_score(ds, entry, "no tag here") == 0.0


def test_a_crashing_scorer_means_wrong():
    class Boom:
        def score_answer(self, answer, entry):
            raise RuntimeError("boom")

    assert task_score(Boom(), {}, "<answer>x</answer>") == 0.0
