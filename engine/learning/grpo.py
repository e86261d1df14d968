"""GRPO, as the SAPO paper runs it: pure functions for advantages and the clipped loss.

Follows the paper (arXiv 2509.08721, section 4) where it is specific:
- advantage of a completion = (r - mean(group)) / (std(group) + eps), per question group;
- groups whose rewards are all equal carry no signal and are dropped (counted);
- token-level PPO-clip objective with asymmetric clipping eps_low 0.2, eps_high 0.28 (DAPO);
- no KL term, no reference model.
Departures and choices the paper leaves open:
- std is the population std of the group (L is small, 4-8; the unbiased one inflates it);
- the loss is averaged over every completion token in the update (DAPO's token-level mean),
  not per sequence first, so long answers are not down-weighted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from engine.tasks.groups import ScoredGroup, TrainGroup
from wire.protocol import has_spread

ADV_EPS = 1e-4


def group_advantages(rewards: Sequence[float], eps: float = ADV_EPS) -> list[float] | None:
    """Normalised advantages for one group, or None when every reward is the same."""
    if not has_spread(list(rewards)):
        return None
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)
    return [(r - mean) / (std + eps) for r in rewards]


@dataclass(frozen=True)
class LossStats:
    loss: float
    clip_low_frac: float  # tokens whose ratio was clipped below (A < 0, ratio < 1 - eps_low)
    clip_high_frac: float  # tokens clipped above (A > 0, ratio > 1 + eps_high)
    tokens: int


def clipped_token_loss(
    logp_new: torch.Tensor,  # (B, T) log-probs of the taken tokens under the current policy
    logp_old: torch.Tensor,  # (B, T) the same under the policy that sampled them (no grad)
    advantages: torch.Tensor,  # (B,) one per sequence
    mask: torch.Tensor,  # (B, T) 1 on completion tokens
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    normalizer: float | None = None,  # total tokens in the whole update, for accumulation
    weights: torch.Tensor | None = None,  # (B, T) constant per-token weights (engine.learning.offpolicy), 1 if None
) -> tuple[torch.Tensor, LossStats]:
    """PPO-clip surrogate, summed over tokens and divided by the update's token count."""
    mask = mask.to(logp_new.dtype)
    ratio = torch.exp(logp_new - logp_old)  # (B, T)
    adv = advantages[:, None].to(logp_new.dtype)  # (B, 1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    per_token = -torch.minimum(unclipped, clipped)  # (B, T)
    if weights is not None:
        per_token = per_token * weights.detach().to(per_token.dtype)
    n_tokens = float(mask.sum().item())
    denom = normalizer if normalizer is not None else max(n_tokens, 1.0)
    loss = (per_token * mask).sum() / denom
    with torch.no_grad():
        low = ((ratio < 1.0 - eps_low) & (adv < 0)).to(mask.dtype) * mask
        high = ((ratio > 1.0 + eps_high) & (adv > 0)).to(mask.dtype) * mask
        tot = max(n_tokens, 1.0)
    return loss, LossStats(float(loss.item()), float(low.sum()) / tot, float(high.sum()) / tot, int(n_tokens))


def build_groups(groups: list[ScoredGroup]) -> tuple[list[TrainGroup], int]:
    """Training groups from scored groups with reward spread; returns them and the number dropped."""
    out: list[TrainGroup] = []
    dropped = 0
    for g in groups:
        adv = group_advantages(g.rewards)
        if adv is None:
            dropped += 1
            continue
        behavior = [c.logprobs if c.logprobs is not None and len(c.logprobs) == len(c.token_ids) else None
                    for c in g.completions]
        out.append(TrainGroup(g.prompt_ids, [c.token_ids for c in g.completions], adv,
                              behavior if any(b is not None for b in behavior) else None, g.source != "local"))
    return out, dropped
