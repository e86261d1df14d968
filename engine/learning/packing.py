"""Shared-prefix training: every distinct prompt token once, each micro-batch in one pass.

A GRPO update is G groups, each one prompt and L short completions, and the prompts begin alike: the
chat template and system prompt in every one, a task's worked examples in that task's (together often
85 % of a prompt). Running each completion with its own copy of its prompt spends most of the compute on
the same tokens. Here:
  1. The beginnings the update's prompts share run once per update (``plan_prefixes``, ``run_prefixes``):
     the root every prompt starts with, then each task's preamble shared by at least two prompts. The
     trainer runs them without autograd before the micro-batches, so that between micro-batches they hold
     only their keys/values, and once more with autograd after them, for the gradient summed there.
  2. Each micro-batch is one row (``tree_batch``): the rests of its prompts as a radix tree (a question
     shared by a split group's parts once), then each completion as a leaf under its prompt, every token at
     its true position, under a mask that lets a token see its beginning's keys/values, the tokens of its
     ancestor segments and the earlier tokens of its own. One pass of wide matrix products, no padding.
The gradient of each completion's loss reaches every token it depends on once, so loss, log-probs and LoRA
gradients are those of every completion run with its whole prompt (tests/test_trainer.py, to 1e-5).
Before (121cef9), step 2 was two passes per micro-batch (the prompts' rests, right-padded, then the
completions, right-padded): narrower products and ~4x as many small operations.

Hand-written because no library does this for training: transformers' caches assume decoding (no grad,
append-only, rewritten by a recomputing backward), and tree attention masks are plain tensor code. The
cache object below is duck-typed to what decoder layers call (``update(k, v, layer_idx, ...)``), and it
is idempotent, so a layer may be recomputed by activation checkpointing.
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


@dataclass(frozen=True)
class Segment:
    tokens: tuple[int, ...]
    parent: int  # the segment it follows (-1: none, only its beginning)
    start: int  # the position of its first token in its sequences


def prompt_tree(prompts: Sequence[Sequence[int]], keys: Sequence[int] | None = None,
                offsets: Sequence[int] | None = None) -> tuple[list[Segment], list[int]]:
    """Pure: the prompts' radix tree, parents before children, and the segment each prompt ends in.

    Prompts of different ``keys`` (the beginning they follow) never share a segment; prompt i's tokens
    start at position ``offsets[i]`` (its beginning's length: the same for one key). Prompts must be
    non-empty. Identical prompts end in the same segment; a prompt that is the beginning of another ends
    where the other's segment splits."""
    n_prompts = len(prompts)
    keys = list(keys) if keys is not None else [0] * n_prompts
    offsets = list(offsets) if offsets is not None else [0] * n_prompts
    segments: list[Segment] = []
    ends = [-1] * n_prompts
    by_key: dict[int, list[int]] = {}
    for i, k in enumerate(keys):
        by_key.setdefault(k, []).append(i)
    todo = [(members, 0, -1) for members in by_key.values()]  # (prompts sharing ``depth`` tokens, depth, parent)
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
            segments.append(Segment(tuple(first[depth:n]), parent, offsets[branch[0]] + depth))
            me = len(segments) - 1
            for i in branch:
                if len(prompts[i]) == n:
                    ends[i] = me
            longer = [i for i in branch if len(prompts[i]) > n]
            if longer:
                todo.append((longer, n, me))
    return segments, ends


def _keys(cuts: Sequence[int], families: Sequence[int]) -> list[int]:
    """The beginning each prompt's rest follows: its family when some of it ran before, else none (-1)."""
    return [f if c else -1 for f, c in zip(families, cuts)]


def tree_tokens(prompts: Sequence[Sequence[int]], cuts: Sequence[int] | None = None,
                families: Sequence[int] | None = None) -> int:
    """Prompt tokens ``tree_batch`` runs for these prompts: each distinct rest once per beginning."""
    cuts = list(cuts) if cuts is not None else [0] * len(prompts)
    families = list(families) if families is not None else [0] * len(prompts)
    return sum(len(s.tokens) for s in prompt_tree([p[c:] for p, c in zip(prompts, cuts)], _keys(cuts, families))[0])


@dataclass(frozen=True)
class TreeBatch:
    """One micro-batch as a single row: its prompts' rests as a tree, then one segment per completion."""

    ids: torch.Tensor  # (1, N)
    positions: torch.Tensor  # (1, N) each token's position in its own sequence
    segments: torch.Tensor  # (N,) the segment of each token
    sees: torch.Tensor  # (K, K) bool: segment a sees segment b (b is a or one of its ancestors)
    beginnings: tuple[int, ...]  # the families whose keys/values come before the row, in that order
    lengths: tuple[int, ...]  # their lengths (tokens)
    token_beginning: torch.Tensor  # (N,) which of ``beginnings`` each token sees (-1: none)
    targets: torch.Tensor  # (T,) every completion token, in completion order
    source: torch.Tensor  # (T,) the row index whose hidden state predicts each target
    prompt_tokens: int  # prompt tokens in the row

    def mask(self) -> torch.Tensor:
        """(1, 1, N, C + N) bool: the token's beginning, its ancestor segments' tokens, and its own segment's up
        to the token itself (C: the beginnings' tokens, laid end to end before the row)."""
        s = self.segments
        idx = torch.arange(len(s))
        own = s[:, None] == s[None, :]
        row = self.sees[s[:, None], s[None, :]] & (~own | (idx[None, :] <= idx[:, None]))
        before = torch.zeros(len(s), sum(self.lengths), dtype=torch.bool)
        at = 0
        for j, n in enumerate(self.lengths):
            before[self.token_beginning == j, at:at + n] = True
            at += n
        return torch.cat([before, row], dim=1)[None, None]

    def key_positions(self) -> torch.Tensor:
        """(1, C + N) the true position of every key: each beginning from 0, then the row's tokens."""
        return torch.cat([*(torch.arange(n) for n in self.lengths), self.positions[0]])[None]


def tree_batch(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], rows: Sequence[int],
               cuts: Sequence[int] | None = None, families: Sequence[int] | None = None) -> TreeBatch:
    """Pure layout; ``rows[b]`` is completion b's prompt, whose first ``cuts[g]`` tokens ran before as family
    ``families[g]``'s beginning (``run_prefixes``). Every prompt's rest and every completion must be non-empty."""
    G = len(prompts)
    cuts = list(cuts) if cuts is not None else [0] * G
    families = list(families) if families is not None else [0] * G
    keys = _keys(cuts, families)
    segments, ends = prompt_tree([p[c:] for p, c in zip(prompts, cuts)], keys, cuts)
    n_prompt = len(segments)
    segments = segments + [Segment(tuple(c), ends[g], len(prompts[g])) for c, g in zip(completions, rows)]
    beginnings = tuple(dict.fromkeys(k for k in keys if k >= 0))
    lengths = tuple(next(c for c, k in zip(cuts, keys) if k == f) for f in beginnings)
    seg_key = [-1] * len(segments)  # the beginning each segment follows: its prompts', down the chain
    for g, e in enumerate(ends):
        while e >= 0 and seg_key[e] != keys[g]:
            seg_key[e], e = keys[g], segments[e].parent
    for b, g in enumerate(rows):
        seg_key[n_prompt + b] = keys[g]
    seg_beginning = [beginnings.index(k) if k >= 0 else -1 for k in seg_key]
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
    owner_t = torch.tensor(owner)
    return TreeBatch(torch.tensor([ids]), torch.tensor([positions]), owner_t, sees, beginnings, lengths,
                     torch.tensor(seg_beginning)[owner_t], torch.tensor([t for c in completions for t in c]),
                     torch.tensor(source), sum(len(s.tokens) for s in segments[:n_prompt]))


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


def gather_prefix(caches: Sequence[PrefixCache | None], beginnings: Sequence[int]) -> PrefixCache | None:
    """A row's beginnings' keys/values laid end to end, per layer ((1, kv_heads, C, d)), as ``TreeBatch.mask``
    expects them; None when the row has none."""
    if not beginnings:
        return None
    out = PrefixCache()
    chosen = [caches[f] for f in beginnings]
    for layer in chosen[0].keys:  # type: ignore[union-attr]
        out.keys[layer] = torch.cat([c.keys[layer] for c in chosen], dim=2)  # type: ignore[union-attr]
        out.values[layer] = torch.cat([c.values[layer] for c in chosen], dim=2)  # type: ignore[union-attr]
    return out


def hidden_for_targets(decoder: torch.nn.Module, batch: TreeBatch, prefix: PrefixCache | None = None
                       ) -> torch.Tensor:
    """Final hidden states (T, H) that predict ``batch.targets``: the row in one pass, after its beginnings'
    keys/values (``prefix``, from ``gather_prefix``; None when it has none)."""
    weight = decoder.get_input_embeddings().weight
    pos = batch.positions
    mask = _masks(batch.mask(), pos, batch.key_positions(), decoder.config, weight.dtype, weight.device)
    cache = {_cache_kwarg(decoder): PrefixCache(prefix)} if prefix is not None else {}
    hidden = decoder(input_ids=batch.ids.to(weight.device), attention_mask=mask, position_ids=pos.to(weight.device),
                     use_cache=False, **cache).last_hidden_state  # (1, N, H)
    return hidden[0].index_select(0, batch.source.to(weight.device))


def prompt_mask(lens: torch.Tensor, width: int) -> torch.Tensor:
    """(G, 1, P, P): causal, and never a padded key. Padded query rows still see key 0 (no NaN)."""
    idx = torch.arange(width)
    causal = idx[None, :] <= idx[:, None]  # (P, P) key <= query
    valid = idx[None, :] < lens[:, None]  # (G, P)
    return (causal[None] & valid[:, None, :])[:, None]


def _cache_kwarg(decoder: torch.nn.Module) -> str:
    """transformers 5 names the cache argument ``cache``; 4.x named it ``past_key_values``."""
    params = inspect.signature(type(decoder).forward).parameters
    return "cache" if "cache" in params else "past_key_values"
