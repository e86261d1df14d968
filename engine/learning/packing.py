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
Before any micro-batch, the beginnings the update's prompts share run once for the whole update
(issue 22; ``plan_prefixes``, ``run_prefixes``): the chat template and system prompt every prompt
starts with, then each task's worked examples, shared by that task's groups (together often 85 %
of a prompt). A micro-batch's groups see their beginning's keys/values as a prefix (step 1 runs
only each prompt's own rest); the gradient that reaches those keys/values is summed over the
micro-batches and sent back through the beginnings' passes once, at the end of the update.
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


# A beginning shorter than this is not run apart: a pass of its own would cost more than it saves.
MIN_SHARED = 8


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class PrefixPlan:
    """The beginnings an update's prompts share, each run once per update.

    ``families[0]`` is the root, the beginning of every prompt (empty when they share too little);
    each other family is a longer beginning shared by at least two prompts (one task's preamble),
    root included. Every prompt keeps at least one token of its own (its last position predicts
    its completions' first tokens)."""

    families: tuple[tuple[int, ...], ...]
    family_of: dict[tuple[int, ...], int]  # a prompt -> the family whose beginning it sees

    def prefix_len(self, prompt: Sequence[int]) -> int:
        return len(self.families[self.family_of.get(tuple(prompt), 0)])

    @property
    def tokens(self) -> int:
        """Tokens the beginnings' passes run: the root once, each family's own part once."""
        root = len(self.families[0])
        return root + sum(len(f) - root for f in self.families[1:])


def plan_prefixes(prompts: Sequence[Sequence[int]]) -> PrefixPlan:
    """Pure: the root, then families of consecutive prompts (in sorted order) sharing a longer beginning."""
    ps = sorted(tuple(p) for p in prompts)
    if len(ps) < 2:
        return PrefixPlan(((),), {})
    root_len = min(min(common_length(ps[0], p) for p in ps), min(map(len, ps)) - 1)
    root = ps[0][:root_len] if root_len >= MIN_SHARED else ()
    families: list[tuple[int, ...]] = [root]
    family_of: dict[tuple[int, ...], int] = {}
    start = 0
    while start < len(ps):
        end, shared = start + 1, len(ps[start]) - 1
        # Sorted prompts: the beginning a run of them shares is the least of its neighbours' common lengths.
        while end < len(ps):
            longer = min(shared, common_length(ps[end - 1], ps[end]), len(ps[end]) - 1)
            if longer < len(root) + MIN_SHARED:
                break
            shared, end = longer, end + 1
        if end - start >= 2:
            families.append(ps[start][:shared])
            family_of.update({p: len(families) - 1 for p in ps[start:end]})
        start = end
    return PrefixPlan(tuple(families), family_of)


def run_prefixes(decoder: torch.nn.Module, plan: PrefixPlan) -> list[PrefixCache | None]:
    """Each family's keys/values per layer ((1, kv_heads, C, d), with their autograd history): the root's
    pass, then each family's own part attending to the root. None for an empty root."""
    config = decoder.config
    weight = decoder.get_input_embeddings().weight
    dtype, dev = weight.dtype, weight.device
    name = _cache_kwarg(decoder)
    root = plan.families[0]
    C0 = len(root)
    out: list[PrefixCache | None] = [None]
    if C0:
        out[0] = PrefixCache()
        pos = torch.arange(C0)[None]
        decoder(input_ids=torch.tensor([root]).to(dev),
                attention_mask=_masks(prompt_mask(torch.tensor([C0]), C0), pos, pos, config, dtype, dev),
                position_ids=pos.to(dev), use_cache=False, **{name: out[0]})
    for fam in plan.families[1:]:
        part = fam[C0:]
        L = len(part)
        cache = PrefixCache(out[0], keep=True) if C0 else PrefixCache()
        q_pos = (C0 + torch.arange(L))[None]
        k_pos = torch.arange(C0 + L)[None]
        seen = torch.cat([torch.ones(1, 1, L, C0, dtype=torch.bool), prompt_mask(torch.tensor([L]), L)], dim=3)
        decoder(input_ids=torch.tensor([part]).to(dev), attention_mask=_masks(seen, q_pos, k_pos, config, dtype, dev),
                position_ids=q_pos.to(dev), use_cache=False, **{name: cache})
        out.append(cache)
    return out


def gather_prefixes(caches: Sequence[PrefixCache | None], families: Sequence[int],
                    lens: Sequence[int]) -> PrefixCache | None:
    """A micro-batch's prefix: row g gets family ``families[g]``'s keys/values, right-padded to the longest
    (the mask hides the padding). None when no row has a beginning."""
    width = max(lens)
    if width == 0:
        return None
    some = next(c for c in caches if c is not None)
    out = PrefixCache()
    for layer, like in some.keys.items():
        for store, kind in ((out.keys, "keys"), (out.values, "values")):
            rows = []
            for f, n in zip(families, lens):
                cache = caches[f]
                t = getattr(cache, kind)[layer] if cache is not None and n else like.new_zeros(
                    (1, like.shape[1], 0, like.shape[3]))
                rows.append(torch.nn.functional.pad(t, (0, 0, 0, width - t.shape[2])))
            store[layer] = torch.cat(rows)
    return out


@dataclass(frozen=True)
class GroupBatch:
    """Tensors for one micro-batch of G groups and their B non-empty completions, packed per group."""

    prefix_lens: torch.Tensor  # (G,) tokens of each prompt's beginning run before the micro-batch (0: none)
    prompt_ids: torch.Tensor  # (G, P) the rest of each prompt, right-padded
    prompt_lens: torch.Tensor  # (G,) lengths of those rests
    completion_ids: torch.Tensor  # (G, S): row g is group g's completions end to end, right-padded
    positions: torch.Tensor  # (G, S) each completion token's position: its prompt's length + its index
    segments: torch.Tensor  # (G, S) which completion (0..B-1) a token belongs to; -1 for padding
    targets: torch.Tensor  # (N,) every completion token, packed in completion order
    # Where each target's predicting hidden state lives in cat(rest hidden (G*P), completion hidden (G*S)).
    source: torch.Tensor  # (N,)


def make_batch(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], rows: Sequence[int],
               pad_id: int = 0, prefix_lens: Sequence[int] | None = None) -> GroupBatch:
    """Pure tensor layout; ``rows[b]`` is completion b's prompt, whose first ``prefix_lens[g]`` tokens ran
    before (``run_prefixes``). Every prompt's rest and every completion must be non-empty."""
    G = len(prompts)
    cuts = list(prefix_lens) if prefix_lens is not None else [0] * G
    rests = [p[c:] for p, c in zip(prompts, cuts)]
    P = max(len(p) for p in rests)
    fill = [0] * G  # tokens placed in each group's row so far
    offsets = []
    for c, g in zip(completions, rows):
        offsets.append(fill[g])
        fill[g] += len(c)
    S = max(fill)
    prompt_ids = torch.full((G, P), pad_id, dtype=torch.long)
    for g, p in enumerate(rests):
        prompt_ids[g, :len(p)] = torch.tensor(p)
    completion_ids = torch.full((G, S), pad_id, dtype=torch.long)
    positions = torch.zeros((G, S), dtype=torch.long)
    segments = torch.full((G, S), -1, dtype=torch.long)
    source: list[int] = []
    for b, (c, g, o) in enumerate(zip(completions, rows, offsets)):
        n, p = len(c), len(rests[g])
        completion_ids[g, o:o + n] = torch.tensor(c)
        positions[g, o:o + n] = torch.arange(cuts[g] + p, cuts[g] + p + n)
        segments[g, o:o + n] = b
        # Token 0 is predicted by the prompt's last position; token j > 0 by the completion's position j - 1.
        source.append(g * P + p - 1)
        source += range(G * P + g * S + o, G * P + g * S + o + n - 1)
    return GroupBatch(torch.tensor(cuts), prompt_ids, torch.tensor([len(p) for p in rests]), completion_ids,
                      positions, segments, torch.tensor([t for c in completions for t in c]), torch.tensor(source))


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
    return completion_mask_seeing(torch.arange(prompt_width)[None, :] < prompt_lens[:, None], segments)


def completion_mask_seeing(own_prompt: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """``completion_mask`` with the row's visible prompt keys given as a (G, W) mask (a beginning padded
    to the micro-batch's longest, then the rest)."""
    S = segments.shape[1]
    idx = torch.arange(S)
    causal = idx[None, :] <= idx[:, None]  # (S, S) key <= query
    same = (segments[:, :, None] == segments[:, None, :]) & (segments[:, None, :] >= 0)  # (G, S, S)
    left = own_prompt[:, None, :].expand(-1, S, -1)
    return torch.cat([left, same & causal[None]], dim=2)[:, None]


def _cache_kwarg(decoder: torch.nn.Module) -> str:
    """transformers 5 names the cache argument ``cache``; 4.x named it ``past_key_values``."""
    params = inspect.signature(type(decoder).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def hidden_for_targets(decoder: torch.nn.Module, batch: GroupBatch, prefix: PrefixCache | None = None) -> torch.Tensor:
    """Final hidden states (N, H) that predict ``batch.targets``: each prompt's rest runs once per group,
    after its beginning's keys/values (``prefix``, from ``gather_prefixes``; None when there are none)."""
    config = decoder.config
    weight = decoder.get_input_embeddings().weight
    dtype, dev = weight.dtype, weight.device
    G, P = batch.prompt_ids.shape
    C = int(batch.prefix_lens.max()) if prefix is not None else 0
    name = _cache_kwarg(decoder)
    # 1. each prompt's rest after its beginning: what it sees is kept for step 2
    record = PrefixCache(prefix, keep=True) if prefix is not None else PrefixCache()
    begun = torch.arange(C)[None, :] < batch.prefix_lens[:, None]  # (G, C): the row's beginning, not padding
    p_pos = batch.prefix_lens[:, None] + torch.arange(P)[None]  # (G, P) true positions
    p_keys = torch.cat([torch.arange(C)[None].expand(G, C), p_pos], dim=1)  # (G, C + P)
    seen = torch.cat([begun[:, None, None, :].expand(G, 1, P, C), prompt_mask(batch.prompt_lens, P)], dim=3)
    hp = decoder(input_ids=batch.prompt_ids.to(dev),
                 attention_mask=_masks(seen, p_pos, p_keys, config, dtype, dev),
                 position_ids=p_pos.to(dev), use_cache=False, **{name: record}).last_hidden_state  # (G, P, H)
    # 2. the completions, after all of their prompt's keys/values
    own = torch.cat([begun, torch.arange(P)[None, :] < batch.prompt_lens[:, None]], dim=1)  # (G, C + P)
    keys = torch.cat([p_keys, batch.positions], dim=1)  # (G, C + P + S): true positions, for sliding windows
    hc = decoder(input_ids=batch.completion_ids.to(dev),
                 attention_mask=_masks(completion_mask_seeing(own, batch.segments), batch.positions, keys,
                                       config, dtype, dev),
                 position_ids=batch.positions.to(dev), use_cache=False,
                 **{name: PrefixCache(record)}).last_hidden_state  # (G, S, H)
    flat = torch.cat([hp.reshape(G * P, -1), hc.reshape(-1, hc.shape[-1])])
    return flat.index_select(0, batch.source.to(dev))
