"""Shared-prefix training: a micro-batch's tokens as one tree, each distinct token run once.

A GRPO update is G groups, each one prompt and L short completions, and the prompts begin alike: the
chat template and system prompt in every one, a task's worked examples in that task's (together often
85 % of a prompt). Running each completion with its own copy of its prompt spends most of the compute on
the same tokens. Here a micro-batch is laid out as a tree instead:
  - the prompts form a radix tree (``prompt_tree``): a beginning several prompts share is one segment,
    each prompt's own rest another, down to the segment where the prompt ends;
  - each completion is a leaf segment under its prompt's last segment;
  - all segments run as one row of N tokens, each token at its true position in its own sequence, under
    a mask that lets it see the tokens of its ancestor segments and the earlier tokens of its own.
So every distinct token runs once, forward and backward, in one pass of wide matrix products, with no
padding; the gradient of each completion's loss reaches every ancestor once. Loss, log-probs and LoRA
gradients are those of every completion run with its whole prompt (tests/test_trainer.py, to 1e-5).
Before this (issue 22, 121cef9), the beginnings ran in passes of their own (twice: without autograd, then
with it for their summed gradient) and each micro-batch ran its prompts' rests and its completions in two
more, right-padded: many narrow products and ~400,000 small operations a step; one row is ~1.6x faster.

Hand-written because no library builds tree attention for training: the mask is plain tensor code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class Segment:
    tokens: tuple[int, ...]
    parent: int  # the segment it follows (-1: none)
    start: int  # the position of its first token in its sequences


def prompt_tree(prompts: Sequence[Sequence[int]]) -> tuple[list[Segment], list[int]]:
    """Pure: the prompts' radix tree, parents before children, and the segment each prompt ends in.

    Prompts must be non-empty. Identical prompts end in the same segment; a prompt that is the beginning
    of another ends where the other's segment splits."""
    segments: list[Segment] = []
    ends = [-1] * len(prompts)
    todo = [(list(range(len(prompts))), 0, -1)]  # (prompts sharing their first ``depth`` tokens, depth, parent)
    while todo:
        members, depth, parent = todo.pop(0)
        branches: dict[int, list[int]] = {}
        for i in members:
            branches.setdefault(prompts[i][depth], []).append(i)
        for branch in branches.values():
            first, end = prompts[branch[0]], min(len(prompts[i]) for i in branch)
            n = depth + 1
            while n < end and all(prompts[i][n] == first[n] for i in branch):
                n += 1
            segments.append(Segment(tuple(first[depth:n]), parent, depth))
            me = len(segments) - 1
            for i in branch:
                if len(prompts[i]) == n:
                    ends[i] = me
            longer = [i for i in branch if len(prompts[i]) > n]
            if longer:
                todo.append((longer, n, me))
    return segments, ends


def tree_tokens(prompts: Sequence[Sequence[int]]) -> int:
    """Prompt tokens a tree of these prompts runs: each distinct beginning once."""
    return sum(len(s.tokens) for s in prompt_tree(prompts)[0])


@dataclass(frozen=True)
class TreeBatch:
    """One micro-batch as a single row: prompt segments, then one segment per completion."""

    ids: torch.Tensor  # (1, N)
    positions: torch.Tensor  # (1, N) each token's position in its own sequence
    segments: torch.Tensor  # (N,) the segment of each token
    sees: torch.Tensor  # (K, K) bool: segment a sees segment b (b is a or one of its ancestors)
    targets: torch.Tensor  # (T,) every completion token, in completion order
    source: torch.Tensor  # (T,) the row index whose hidden state predicts each target
    prompt_tokens: int  # prompt tokens in the row

    def mask(self) -> torch.Tensor:
        """(1, 1, N, N) bool: an ancestor segment's tokens, and the own segment's up to the token itself."""
        s = self.segments
        idx = torch.arange(len(s))
        own = s[:, None] == s[None, :]
        return (self.sees[s[:, None], s[None, :]] & (~own | (idx[None, :] <= idx[:, None])))[None, None]


def tree_batch(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
               rows: Sequence[int]) -> TreeBatch:
    """Pure layout; ``rows[b]`` is completion b's prompt. Prompts and completions must be non-empty."""
    segments, ends = prompt_tree(prompts)
    n_prompt = len(segments)
    segments = segments + [Segment(tuple(c), ends[g], len(prompts[g])) for c, g in zip(completions, rows)]
    starts, ids, positions, owner = [], [], [], []
    for k, s in enumerate(segments):
        starts.append(len(ids))
        ids += s.tokens
        positions += range(s.start, s.start + len(s.tokens))
        owner += [k] * len(s.tokens)
    sees = torch.eye(len(segments), dtype=torch.bool)
    for k, s in enumerate(segments):  # parents come first, so a parent's row is complete
        if s.parent >= 0:
            sees[k] |= sees[s.parent]
    source: list[int] = []
    for b, g in enumerate(rows):
        k, parent = n_prompt + b, ends[g]
        # Token 0 is predicted by the prompt's last token; token j > 0 by the completion's token j - 1.
        source.append(starts[parent] + len(segments[parent].tokens) - 1)
        source += range(starts[k], starts[k] + len(segments[k].tokens) - 1)
    return TreeBatch(torch.tensor([ids]), torch.tensor([positions]), torch.tensor(owner), sees,
                     torch.tensor([t for c in completions for t in c]), torch.tensor(source),
                     sum(len(s.tokens) for s in segments[:n_prompt]))


def _mask(allowed: torch.Tensor, config: object, dtype: torch.dtype) -> torch.Tensor:
    """A 4D mask (B, 1, q, kv) the way the model's attention wants it: bool, or additive for eager."""
    if getattr(config, "_attn_implementation", "sdpa") == "eager":
        return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return allowed


def sliding_window(config: object) -> int | None:
    """The window of a model whose layers mix sliding-window and full attention (Gemma 3), else None."""
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        return int(getattr(config, "sliding_window"))
    return None


def _masks(allowed: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor, config: object, dtype: torch.dtype,
           device: torch.device) -> torch.Tensor | dict[str, torch.Tensor]:
    """The mask for every layer, or one per layer type where some layers see only a window.

    ``q_pos`` (B, q) and ``k_pos`` (B, kv) are true token positions: a sliding layer lets a query
    see keys less than ``window`` positions back, as transformers' own sliding masks do.
    """
    full = _mask(allowed, config, dtype).to(device)
    window = sliding_window(config)
    if window is None:
        return full
    near = (q_pos[:, :, None] - k_pos[:, None, :] < window)[:, None]  # (B, 1, q, kv)
    return {"full_attention": full, "sliding_attention": _mask(allowed & near, config, dtype).to(device)}


def hidden_for_targets(decoder: torch.nn.Module, batch: TreeBatch) -> torch.Tensor:
    """Final hidden states (T, H) that predict ``batch.targets``: the whole tree in one pass."""
    weight = decoder.get_input_embeddings().weight
    pos = batch.positions
    mask = _masks(batch.mask(), pos, pos, decoder.config, weight.dtype, weight.device)
    hidden = decoder(input_ids=batch.ids.to(weight.device), attention_mask=mask, position_ids=pos.to(weight.device),
                     use_cache=False).last_hidden_state  # (1, N, H)
    return hidden[0].index_select(0, batch.source.to(weight.device))
