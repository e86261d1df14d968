"""Per-token weights of the policy-gradient loss for tokens the current policy did not sample.

Two sources of off-policy tokens:
- own rollouts: sampled by llama.cpp (quantized weights), trained by torch (full weights); the two
  differ by ~0.06-0.12 nats/token on the bundled model. Truncated importance sampling weights each
  token by min(pi_train / mu_sampler, C) (TRL's ``vllm_importance_sampling_cap``), ``importance_cap``;
- external groups: sampled by another node's policy. Their negatives need care (TOPR, arXiv
  2503.14286): ``external_negatives`` = ``onpolicy`` (weight 1, the paper and GenRL), ``drop``
  (weight 0: learn only from others' successes), or ``topr`` (weight clip(pi / mu, 0, 1), positives
  kept as plain fine-tuning with weight 1). mu is the sender's per-token probability when the group
  carries it (``wire.protocol.Group.logprobs``); without it the ratio is unknown and taken as 1.

The weights are constants in the loss (no gradient flows through them), as in TOPR and TRL.
"""

from __future__ import annotations

import torch

NEGATIVES = ("onpolicy", "drop", "topr")


def token_weights(logp: torch.Tensor, behavior: torch.Tensor, advantages: torch.Tensor, external: torch.Tensor,
                  negatives: str = "onpolicy", cap: float = 0.0) -> torch.Tensor:
    """One weight per token.

    ``logp``: the current policy's log-probs of the tokens (n,); ``behavior``: the sampler's, NaN
    where unknown (n,); ``advantages`` (n,); ``external``: True for tokens of others' groups (n,).
    ``cap`` > 0 turns truncated importance sampling on (own tokens, and external positives unless
    ``topr``); 0 leaves ratios out.
    """
    if negatives not in NEGATIVES:
        raise ValueError(f"unknown external negatives rule {negatives!r}: choose one of {', '.join(NEGATIVES)}")
    logp, behavior = logp.detach().float(), behavior.float()
    known = ~torch.isnan(behavior)
    ratio = torch.where(known, torch.exp(logp - torch.nan_to_num(behavior)), torch.ones_like(logp))
    w = torch.clamp(ratio, max=cap) if cap > 0 else torch.ones_like(logp)
    neg = external & (advantages < 0)
    if negatives == "drop":
        w = torch.where(neg, torch.zeros_like(w), w)
    elif negatives == "topr":
        w = torch.where(external & (advantages >= 0), torch.ones_like(w), w)
        w = torch.where(neg, torch.clamp(ratio, 0.0, 1.0), w)
    return w


def carries_gradient(advantage: float, external: bool, negatives: str) -> bool:
    """Whether a completion can move the policy. One whose every token has weight x advantage 0 whatever the
    policy (advantage 0, or a peer's below-average answer under ``drop``) adds nothing to the gradient: the
    trainer leaves it out of forward and backward, and still counts its tokens in the loss's normaliser."""
    if advantage == 0.0:
        return False
    return not (external and advantage < 0 and negatives == "drop")
