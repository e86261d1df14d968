"""Shared-prefix forward: a group's prompt runs once, its L completions attend to its keys/values.

A GRPO group is one prompt (100-200 tokens with few-shot examples) and L short completions
(10-30 tokens on average, but up to the sampling limit when one runs on). Running L full
sequences spends most of the training compute re-processing the same prompt L times. Here,
per micro-batch of G groups:
  1. the G prompts run once, right-padded, as a batch; each decoder layer's keys and values
     (after RoPE) are recorded, with their autograd history;
  2. each group's completions run packed end to end in one row (G rows, no padding between
     completions): attention sees the row's prompt keys/values followed by the row's own
     tokens, each completion only its own earlier tokens (a block-diagonal causal mask), with
     position ids restarting after the prompt for every completion.
When the micro-batch's prompts begin alike (a task's system prompt and worked examples, often 85 %
of a prompt), that common beginning runs once before step 1, as one row; step 1 then runs only
each prompt's own rest, attending to the common keys/values, and step 2 sees both (issue 22).
Packing matters as much as sharing: one completion that ran to the length limit (96 tokens)
beside seven of ~20 made a padded batch 4-5x larger than its real tokens.
The gradient of every completion's loss flows back through the recorded keys/values into the
one prompt pass, so loss and LoRA gradients are those of L full sequences (tested to 1e-5).

Hand-written because no library does this for training: transformers' caches assume decoding
(no grad, append-only, rewritten by a recomputing backward). The cache object below is
duck-typed to what decoder layers call (``update(k, v, layer_idx, ...)``), and it is
idempotent, so a layer may be recomputed by activation checkpointing.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Sequence

import torch


class PrefixCache:
    """Records each layer's prompt keys/values (first call wins), or serves them as a prefix.

    Recording (``source`` None): ``update`` stores k, v and returns them unchanged.
    Serving: ``update`` returns (prefix ++ k, prefix ++ v) along the sequence axis, row for
    row (row g of the completions is group g; a one-row prefix serves every row), storing
    nothing, or with ``keep`` storing what it returned (first call wins), to serve a next pass.
    No mode changes what a repeated call returns, which is what a recomputing backward needs.
    """

    def __init__(self, source: "PrefixCache | None" = None, keep: bool = False) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.source = source
        self.keep = keep

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        if self.source is None:
            self.keys.setdefault(layer_idx, key)
            self.values.setdefault(layer_idx, value)
            return key, value
        pk, pv = self.source.keys[layer_idx], self.source.values[layer_idx]  # (G or 1, kv_heads, P, d)
        if pk.shape[0] != key.shape[0]:  # the common beginning, one row for all
            pk, pv = pk.expand(key.shape[0], -1, -1, -1), pv.expand(key.shape[0], -1, -1, -1)
        k, v = torch.cat([pk, key], dim=2), torch.cat([pv, value], dim=2)
        if self.keep:
            return self.keys.setdefault(layer_idx, k), self.values.setdefault(layer_idx, v)
        return k, v

    def get_seq_length(self, layer_idx: int = 0) -> int:  # asked only when position ids are missing
        return 0


# A common beginning shorter than this runs with each prompt: a pass of its own would cost more than it saves.
MIN_SHARED = 8


def shared_length(prompts: Sequence[Sequence[int]]) -> int:
    """How many first tokens all prompts share and run once: at least one token of each prompt is left
    for its own pass (its last position predicts the completions' first tokens); 0 for one prompt."""
    if len(prompts) < 2:
        return 0
    first, n = prompts[0], min(len(p) for p in prompts) - 1
    for i in range(n):
        if any(p[i] != first[i] for p in prompts):
            n = i
            break
    return n if n >= MIN_SHARED else 0


@dataclass(frozen=True)
class GroupBatch:
    """Tensors for one micro-batch of G groups and their B non-empty completions, packed per group."""

    shared_ids: torch.Tensor  # (C,) the first tokens every prompt shares, run once (C may be 0)
    prompt_ids: torch.Tensor  # (G, P) the rest of each prompt, right-padded
    prompt_lens: torch.Tensor  # (G,) lengths of those rests
    completion_ids: torch.Tensor  # (G, S): row g is group g's completions end to end, right-padded
    positions: torch.Tensor  # (G, S) each completion token's position: its prompt's length + its index
    segments: torch.Tensor  # (G, S) which completion (0..B-1) a token belongs to; -1 for padding
    targets: torch.Tensor  # (N,) every completion token, packed in completion order
    # Where each target's predicting hidden state lives in
    # cat(shared hidden (C), prompt hidden (G*P), completion hidden (G*S)).
    source: torch.Tensor  # (N,)

    @property
    def computed_prompt_tokens(self) -> int:
        return len(self.shared_ids) + int(self.prompt_lens.sum())


def make_batch(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], rows: Sequence[int],
               pad_id: int = 0) -> GroupBatch:
    """Pure tensor layout; ``rows[b]`` is completion b's prompt. Every prompt and completion must be non-empty."""
    C = shared_length(prompts)
    shared, full = list(prompts[0][:C]), prompts
    prompts = [p[C:] for p in prompts]
    G = len(prompts)
    P = max(len(p) for p in prompts)
    fill = [0] * G  # tokens placed in each group's row so far
    offsets = []
    for c, g in zip(completions, rows):
        offsets.append(fill[g])
        fill[g] += len(c)
    S = max(fill)
    prompt_ids = torch.full((G, P), pad_id, dtype=torch.long)
    for g, p in enumerate(prompts):
        prompt_ids[g, :len(p)] = torch.tensor(p)
    completion_ids = torch.full((G, S), pad_id, dtype=torch.long)
    positions = torch.zeros((G, S), dtype=torch.long)
    segments = torch.full((G, S), -1, dtype=torch.long)
    source: list[int] = []
    for b, (c, g, o) in enumerate(zip(completions, rows, offsets)):
        n, p = len(c), len(prompts[g])
        completion_ids[g, o:o + n] = torch.tensor(c)
        positions[g, o:o + n] = torch.arange(C + p, C + p + n)
        segments[g, o:o + n] = b
        # Token 0 is predicted by the prompt's last position; token j > 0 by the completion's position j - 1.
        source.append(C + g * P + p - 1)
        source += range(C + G * P + g * S + o, C + G * P + g * S + o + n - 1)
    assert all(list(f) == shared + list(p) for f, p in zip(full, prompts))
    return GroupBatch(torch.tensor(shared, dtype=torch.long), prompt_ids, torch.tensor([len(p) for p in prompts]),
                      completion_ids, positions, segments, torch.tensor([t for c in completions for t in c]),
                      torch.tensor(source))


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


def prompt_mask(lens: torch.Tensor, width: int) -> torch.Tensor:
    """(G, 1, P, P): causal, and never a padded key. Padded query rows still see key 0 (no NaN)."""
    idx = torch.arange(width)
    causal = idx[None, :] <= idx[:, None]  # (P, P) key <= query
    valid = idx[None, :] < lens[:, None]  # (G, P)
    return (causal[None] & valid[:, None, :])[:, None]


def completion_mask(prompt_lens: torch.Tensor, segments: torch.Tensor, prompt_width: int) -> torch.Tensor:
    """(G, 1, S, P + S): the row's own prompt tokens (not its padding), then, causally, only tokens of the
    same completion. Padding queries see their prompt (no NaN rows); padding keys are never seen."""
    S = segments.shape[1]
    own_prompt = torch.arange(prompt_width)[None, :] < prompt_lens[:, None]  # (G, P)
    idx = torch.arange(S)
    causal = idx[None, :] <= idx[:, None]  # (S, S) key <= query
    same = (segments[:, :, None] == segments[:, None, :]) & (segments[:, None, :] >= 0)  # (G, S, S)
    left = own_prompt[:, None, :].expand(-1, S, -1)
    return torch.cat([left, same & causal[None]], dim=2)[:, None]


def _cache_kwarg(decoder: torch.nn.Module) -> str:
    """transformers 5 names the cache argument ``cache``; 4.x named it ``past_key_values``."""
    params = inspect.signature(type(decoder).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def hidden_for_targets(decoder: torch.nn.Module, batch: GroupBatch) -> torch.Tensor:
    """Final hidden states (N, H) that predict ``batch.targets``, prompts run once per group and
    their common beginning once per micro-batch."""
    config = decoder.config
    weight = decoder.get_input_embeddings().weight
    dtype, dev = weight.dtype, weight.device
    G, P = batch.prompt_ids.shape
    C = len(batch.shared_ids)
    name = _cache_kwarg(decoder)
    hidden: list[torch.Tensor] = []
    source = None
    if C:  # 0. the common beginning, one causal row
        source = PrefixCache()
        c_pos = torch.arange(C)[None]
        hs = decoder(input_ids=batch.shared_ids[None].to(dev),
                     attention_mask=_masks(prompt_mask(torch.tensor([C]), C), c_pos, c_pos, config, dtype, dev),
                     position_ids=c_pos.to(dev), use_cache=False, **{name: source}).last_hidden_state  # (1, C, H)
        hidden.append(hs.reshape(C, -1))
    # 1. each prompt's rest, after the common beginning (positions C..): what it sees is kept for step 2
    record = PrefixCache(source, keep=True) if source is not None else PrefixCache()
    p_pos = (C + torch.arange(P))[None].expand(G, P)
    seen = torch.cat([torch.ones(G, 1, P, C, dtype=torch.bool), prompt_mask(batch.prompt_lens, P)], dim=3)
    p_keys = torch.arange(C + P)[None].expand(G, C + P)
    hp = decoder(input_ids=batch.prompt_ids.to(dev),
                 attention_mask=_masks(seen, p_pos, p_keys, config, dtype, dev),
                 position_ids=p_pos.to(dev), use_cache=False, **{name: record}).last_hidden_state  # (G, P, H)
    hidden.append(hp.reshape(G * P, -1))
    # 2. the completions, after all of their prompt's keys/values
    keys = torch.cat([p_keys, batch.positions], dim=1)  # (G, C + P + S): true positions, for sliding windows
    hc = decoder(input_ids=batch.completion_ids.to(dev),
                 attention_mask=_masks(completion_mask(C + batch.prompt_lens, batch.segments, C + P), batch.positions,
                                       keys, config, dtype, dev),
                 position_ids=batch.positions.to(dev), use_cache=False,
                 **{name: PrefixCache(record)}).last_hidden_state  # (G, S, H)
    hidden.append(hc.reshape(-1, hc.shape[-1]))
    return torch.cat(hidden).index_select(0, batch.source.to(dev))
