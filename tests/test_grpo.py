"""GRPO pieces on hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from engine.tasks.groups import Completion, ScoredGroup
from engine.learning.grpo import build_groups, clipped_token_loss, group_advantages


def test_advantages_are_normalised_per_group():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0])  # mean 0.5, population std 0.5
    assert adv == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-3)
    adv = group_advantages([2.0, 0.0, 1.0])  # mean 1, std sqrt(2/3)
    s = math.sqrt(2 / 3)
    assert adv == pytest.approx([1 / s, -1 / s, 0.0], abs=1e-3)
    assert sum(group_advantages([0.3, 0.1, 0.9, 0.2])) == pytest.approx(0.0, abs=1e-9)


def test_groups_without_spread_are_dropped():
    assert group_advantages([1.0, 1.0, 1.0]) is None
    assert group_advantages([0.0, 0.0]) is None
    assert group_advantages([0.5]) is None


def test_build_groups_counts_dropped_groups():
    from engine.tasks.rewards import Score

    def group(rewards):
        comps = [Completion("x", [1, 2], "eog") for _ in rewards]
        scores = [Score(r, r, r == 1, True) for r in rewards]
        return ScoredGroup(question=None, prompt_ids=[9], completions=comps, scores=scores)  # type: ignore[arg-type]

    out, dropped = build_groups([group([1, 0]), group([0, 0]), group([1, 1]), group([0, 1, 1])])
    assert dropped == 2
    assert [len(g.completions) for g in out] == [2, 3]
    assert [round(a, 3) for a in out[0].advantages] == [1.0, -1.0]
    assert out[1].prompt_ids == [9] and out[1].completions == [[1, 2]] * 3


def _loss(new, old, adv, mask=None, **kw):
    new, old = torch.tensor([new], dtype=torch.float64), torch.tensor([old], dtype=torch.float64)
    mask = torch.ones_like(new) if mask is None else torch.tensor([mask], dtype=torch.float64)
    return clipped_token_loss(new, old, torch.tensor([adv], dtype=torch.float64), mask, **kw)


def test_ratio_one_gives_minus_advantage_times_tokens():
    loss, st = _loss([-1.0, -2.0], [-1.0, -2.0], 0.5)
    assert loss.item() == pytest.approx(-0.5)
    assert st.clip_low_frac == 0 and st.clip_high_frac == 0 and st.tokens == 2


def test_positive_advantage_is_clipped_above_at_1_plus_eps_high():
    r = 1.5
    loss, st = _loss([math.log(r)], [0.0], 2.0, eps_low=0.2, eps_high=0.28)
    assert loss.item() == pytest.approx(-(1.28 * 2.0))
    assert st.clip_high_frac == 1.0
    # Within the range: unclipped.
    loss, st = _loss([math.log(1.1)], [0.0], 2.0)
    assert loss.item() == pytest.approx(-2.2)
    assert st.clip_high_frac == 0.0


def test_negative_advantage_is_clipped_below_at_1_minus_eps_low():
    loss, st = _loss([math.log(0.5)], [0.0], -1.0, eps_low=0.2, eps_high=0.28)
    assert loss.item() == pytest.approx(0.8)  # -min(0.5 * -1, 0.8 * -1) = 0.8
    assert st.clip_low_frac == 1.0
    # A ratio above 1 with a negative advantage is never clipped (pessimistic bound).
    loss, _ = _loss([math.log(2.0)], [0.0], -1.0)
    assert loss.item() == pytest.approx(2.0)


def test_clipped_tokens_get_no_gradient():
    new = torch.tensor([[math.log(1.5), math.log(1.1)]], dtype=torch.float64, requires_grad=True)
    loss, _ = clipped_token_loss(new, torch.zeros(1, 2, dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64),
                                 torch.ones(1, 2, dtype=torch.float64))
    loss.backward()
    assert new.grad[0, 0].item() == 0.0
    assert new.grad[0, 1].item() == pytest.approx(-1.1 / 2)


def test_token_level_mean_weights_every_token_equally():
    # Two sequences, 1 and 3 real tokens: the token mean is over 4 tokens, not a mean of two sequence means.
    new = torch.zeros(2, 3, dtype=torch.float64)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]], dtype=torch.float64)
    loss, st = clipped_token_loss(new, new.clone(), torch.tensor([1.0, -1.0], dtype=torch.float64), mask)
    assert st.tokens == 4
    assert loss.item() == pytest.approx((-1 + 3) / 4)


def test_normalizer_makes_accumulation_equal_one_batch():
    new = torch.randn(4, 5, dtype=torch.float64)
    old = new + 0.1 * torch.randn(4, 5, dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 0.3, -2.0], dtype=torch.float64)
    mask = (torch.rand(4, 5) > 0.3).to(torch.float64)
    whole, _ = clipped_token_loss(new, old, adv, mask)
    total = float(mask.sum())
    parts = sum(clipped_token_loss(new[i:i + 2], old[i:i + 2], adv[i:i + 2], mask[i:i + 2], normalizer=total)[0]
                for i in (0, 2))
    assert parts.item() == pytest.approx(whole.item())


def test_group_summary_counts_what_the_update_pushes_up_and_down():
    from engine.tasks.groups import group_summary
    from engine.tasks.questions import Question
    from engine.tasks.rewards import Score
    from wire.protocol import TaskSpec

    q = Question(TaskSpec(dataset="gcd", config={}, seed=1, index=0), "gcd(4, 6)?", "2", {})

    def group(rewards, correct, source="local"):
        comps = [Completion("x", [1], "eog") for _ in rewards]
        scores = [Score(r, float(c), c, True) for r, c in zip(rewards, correct)]
        return ScoredGroup(question=q, prompt_ids=[9], completions=comps, scores=scores, source=source)

    own = group_summary(group([1.1, 0.1, 0.1, 0.0], [True, False, False, False]))
    assert own == {"task": "gcd", "source": "own", "completions": 4, "correct": 1, "positives": 1, "negatives": 3,
                   "spread": True}
    # no spread: nothing pushed either way, the group is dropped
    flat = group_summary(group([0.1, 0.1], [False, False], source="ab" * 32), own_accuracy=0.3333)
    assert flat == {"task": "gcd", "source": "ab" * 6, "completions": 2, "correct": 0, "positives": 0, "negatives": 0,
                    "spread": False, "own_accuracy": 0.333}
