"""Loss weights for off-policy tokens, as pure functions on hand-computed cases, and their effect on the loss."""

from __future__ import annotations

import math

import pytest
import torch

from engine.learning.grpo import clipped_token_loss
from engine.learning.offpolicy import token_weights

NAN = float("nan")
LN2 = math.log(2.0)
# Four tokens: own positive, own negative, external positive, external negative.
ADV = torch.tensor([1.0, -1.0, 1.0, -1.0])
EXT = torch.tensor([False, False, True, True])


def w(logp, behavior, negatives="onpolicy", cap=0.0):
    return token_weights(torch.tensor(logp), torch.tensor(behavior), ADV, EXT, negatives, cap).tolist()


def test_onpolicy_without_cap_is_all_ones():
    assert w([-1.0] * 4, [-2.0] * 4) == [1.0, 1.0, 1.0, 1.0]


def test_truncated_importance_sampling():
    # ratios: e^0 = 1, e^ln2 = 2, e^(3 ln2) = 8 capped at 3, e^-ln2 = 0.5; behavior unknown -> 1
    logp = [0.0, 0.0, 0.0, 0.0]
    beh = [0.0, -LN2, -3 * LN2, LN2]
    assert w(logp, beh, cap=3.0) == pytest.approx([1.0, 2.0, 3.0, 0.5])
    assert w(logp, [NAN, -LN2, NAN, NAN], cap=3.0) == pytest.approx([1.0, 2.0, 1.0, 1.0])


def test_drop_zeroes_external_negatives_only():
    assert w([-1.0] * 4, [NAN] * 4, "drop") == [1.0, 1.0, 1.0, 0.0]


def test_only_completions_whose_weight_times_advantage_is_always_zero_carry_no_gradient():
    from engine.learning.offpolicy import carries_gradient

    assert not carries_gradient(-0.5, external=True, negatives="drop")  # a peer's below-average answer
    assert not carries_gradient(0.0, external=False, negatives="onpolicy")  # at the group's mean
    assert carries_gradient(0.5, external=True, negatives="drop")
    assert carries_gradient(-0.5, external=False, negatives="drop")  # own negatives are trained
    for rule in ("onpolicy", "topr"):  # topr's weight depends on the policy: never skipped
        assert carries_gradient(-0.5, external=True, negatives=rule)


def test_topr_clips_external_negative_ratio_to_0_1_and_keeps_positives_plain():
    # external negative: ratio e^-ln2 = 0.5 kept; a ratio of 4 is clipped to 1; external positive: 1 (plain SFT)
    assert w([0.0, 0.0, 0.0, 0.0], [NAN, NAN, -2 * LN2, LN2], "topr") == pytest.approx([1.0, 1.0, 1.0, 0.5])
    assert w([0.0, 0.0, 0.0, 0.0], [NAN, NAN, NAN, -2 * LN2], "topr") == pytest.approx([1.0, 1.0, 1.0, 1.0])
    # with a cap, own tokens still get truncated IS; the external positive stays 1 under topr
    assert w([0.0] * 4, [-LN2, -LN2, -LN2, -LN2], "topr", cap=3.0) == pytest.approx([2.0, 2.0, 1.0, 1.0])
    # sender unknown: an external negative counts as on-policy
    assert w([0.0] * 4, [NAN] * 4, "topr") == [1.0, 1.0, 1.0, 1.0]


def test_unknown_rule_is_an_error():
    with pytest.raises(ValueError, match="unknown external negatives"):
        token_weights(torch.zeros(1), torch.zeros(1), torch.ones(1), torch.zeros(1, dtype=torch.bool), "keep")


def test_weights_scale_each_tokens_gradient_and_carry_none():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    weights = torch.tensor([[1.0, 0.0]], requires_grad=True)
    loss, _ = clipped_token_loss(logp, logp.detach(), torch.tensor([2.0]), torch.ones(1, 2), normalizer=2.0,
                                 weights=weights)
    loss.backward()
    # ratio 1: d(-A * w * ratio)/d logp = -A * w / normalizer
    assert logp.grad[0].tolist() == pytest.approx([-1.0, 0.0])
    assert weights.grad is None


# --- the sender's log-probs on the wire (optional Group.logprobs) ---

SPEC = {"dataset": "chain_sum", "config": {}, "seed": 1, "index": 0}


def _group(**extra):
    import msgspec

    from wire.protocol import Group

    raw = {"spec": SPEC, "question": "q", "answer": "a", "completions": ["x", "y"], "rewards": [0.0, 1.0],
           "model": "m", **extra}
    return msgspec.json.decode(msgspec.json.encode(raw), type=Group)


def test_groups_without_logprobs_encode_as_before():
    from wire.protocol import group_bytes

    assert b"logprobs" not in group_bytes(_group())
    assert b'"logprobs":[[-0.5],[-1.0,-2.0]]' in group_bytes(_group(logprobs=[[-0.5], [-1.0, -2.0]]))


@pytest.mark.parametrize("bad", [[[0.5], [-1.0]], [[-0.5]], [[-2000.0], [-1.0]]])
def test_hostile_logprobs_are_refused_at_decode(bad):
    import msgspec

    with pytest.raises(msgspec.ValidationError):
        _group(logprobs=bad)


def test_receiver_uses_sender_logprobs_only_when_they_line_up():
    from engine.sharing.admission import Verifier

    v = Verifier((), [], None, tokenize=lambda t: list(range(len(t))), detokenize=lambda ids: "",
                 prompt_ids=lambda q: [], completions=4, max_tokens=8, format_bonus=0.1, model="m")
    g = _group(logprobs=[[-0.1, -0.2, -0.3], [-0.5, -0.6]])
    assert v._sender_logprobs(g, 0, 3, 3) == [-0.1, -0.2, -0.3]  # same length as our ids
    assert v._sender_logprobs(g, 0, 2, 2) == [-0.1, -0.2]  # one more: its end-of-generation token
    assert v._sender_logprobs(g, 0, 3, 2) == [-0.1, -0.2]  # cut to our max_tokens
    assert v._sender_logprobs(g, 1, 5, 5) is None  # tokenized otherwise: unusable
    assert v._sender_logprobs(_group(), 0, 1, 1) is None  # none sent
    other = _group(logprobs=[[-0.1], [-0.5]], model="another-model")
    assert v._sender_logprobs(other, 0, 1, 1) is None  # another model's probabilities mean nothing here


def test_trainer_packs_weights_in_token_order():
    """The trainer's packing: completions in group order, behavior per token, the external flag per group."""
    from types import SimpleNamespace

    from engine.tasks.groups import TrainGroup
    from engine.learning.trainer import TrainConfig, Trainer

    own = TrainGroup([1], [[5, 6], [7]], [1.0, -1.0], behavior=[[-LN2, 0.0], None])
    ext = TrainGroup([2], [[8], [9, 9]], [1.0, -1.0], behavior=None, external=True)
    adv = torch.tensor([1.0, 1.0, -1.0, 1.0, -1.0, -1.0])
    lp = torch.zeros(6)
    stub = SimpleNamespace(cfg=TrainConfig(external_negatives="drop", importance_cap=3.0))
    w = Trainer._weights(stub, [own, ext], lp, adv)
    assert w.tolist() == pytest.approx([2.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    onpolicy = SimpleNamespace(cfg=TrainConfig(external_negatives="onpolicy"))
    assert Trainer._weights(onpolicy, [own, ext], lp, adv) is None  # all ones: skipped
    # The node's default drops peers' negatives, on the reference path (one sequence at a time) too
    assert TrainConfig().external_negatives == "drop"
    seqs = own.sequences() + ext.sequences()
    assert [s.external for s in seqs] == [False, False, True, True]
    w = Trainer._weights(SimpleNamespace(cfg=TrainConfig()), seqs, lp, adv)
    assert w.tolist() == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]


def test_build_groups_carries_behavior_logprobs_and_the_external_flag():
    from engine.tasks.groups import Completion, ScoredGroup
    from engine.learning.grpo import build_groups
    from engine.tasks.rewards import Score

    def group(lps, source="local"):
        comps = [Completion("t", [1, 2], "eog", lp) for lp in lps]
        scores = [Score(r, r, r == 1, True) for r in (0.0, 1.0)]
        return ScoredGroup(question=None, prompt_ids=[9], completions=comps, scores=scores, source=source)  # type: ignore[arg-type]

    own, ext, none = build_groups([group([[-0.1, -0.2], [-0.3]]), group([None, None], "peer"), group([None, None])])[0]
    assert own.behavior == [[-0.1, -0.2], None] and not own.external  # a list of the wrong length is unknown
    assert ext.behavior is None and ext.external
    assert none.behavior is None
