"""One GRPO update of the LoRA policy per round.

Speed and memory are the point of this module.
- Shared prefix: every distinct prompt token runs once (``engine.learning.packing``). The beginnings
  the update's prompts share (system prompt, a task's worked examples) once per update: without
  autograd before the micro-batches, again with it after them for their summed gradient, so that
  they hold only their keys/values in between. Each micro-batch is then one row and one pass: its
  prompts' rests as a tree, each completion a leaf under its prompt. A micro-batch is a set of whole
  groups. The per-sequence path (each completion with its own copy of the prompt) stays as the
  reference the tests and the benchmark compare against (``shared_prefix=False``).
- Checkpointing only when needed: each micro-batch's activation memory is estimated (and
  the estimate calibrated by measurement, ``engine.learning.memory``) and micro-batches are formed
  to fit the budget; a group too large alone, with completions longer than its prompt, is
  split into parts that each run its prompt again (cheaper than recomputing every layer).
  Decoder layers are recomputed in backward only for what still exceeds the budget.
- Target-token log-probs are taken over completion positions only, a chunk of positions at
  a time; their gradient is formed in forward (``_TargetLogprobs``), so the full-vocabulary
  logits are neither kept nor recomputed. They are computed in fp32 whatever the base
  weights' dtype (bf16 on capable hardware).
- Gradients accumulate over micro-batches; the loss is normalised by the update's total
  completion tokens so accumulation equals one big batch.
- Completions that cannot move the policy (``offpolicy.carries_gradient``: a peer's below-average
  answers under the default ``drop``: 34 % of run 6's trained completions) are not run; their tokens
  still count in the normaliser, so the update is the same.
Old log-probs: with one iteration the ratio is exactly 1, so they are the detached new
log-probs of the same pass (no extra forward); with more, they are computed once, before
the first update, with the current policy.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from dataclasses import dataclass, fields
from typing import Callable, Iterator, Sequence, Union

import torch
from torch.utils.checkpoint import checkpoint

from engine.config import NodeConfig, resolve_auto
from engine.models.accel import MAX_AUTO_BUDGET
from engine.tasks.groups import TrainGroup, TrainSequence
from engine.learning.grpo import clipped_token_loss
from engine.learning.offpolicy import carries_gradient, token_weights
from engine.learning.packing import (PrefixCache, PrefixPlan, gather_prefix, hidden_for_targets, plan_prefixes,
                                     run_prefixes, tree_batch, tree_tokens)
from engine.learning.memory import BatchShape, Dims, MemoryPlan, SavedBytes

# peft still asks for transformers' old checkpointing property names; nothing for a user to act on.
warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)

LOGIT_CHUNK = 256  # positions per lm_head chunk: 256 x 49,152 x 4 B = 50 MB at most

Unit = Union[TrainGroup, TrainSequence]


# The training settings' defaults are the node's (engine/config.py says where each comes from), as
# resolved for the bundled model size; written there once, read here.
_NODE = resolve_auto(NodeConfig(), n_params=0)


@dataclass(frozen=True)
class TrainConfig:
    learning_rate: float = _NODE.learning_rate
    optimizer: str = _NODE.optimizer
    weight_decay: float = _NODE.weight_decay
    grad_clip: float = _NODE.grad_clip
    micro_batch: int = _NODE.micro_batch  # completions per micro-batch at most; a group is split only over budget
    iterations: int = _NODE.iterations
    eps_low: float = _NODE.eps_low
    eps_high: float = _NODE.eps_high
    checkpointing: str = _NODE.checkpointing  # auto (by memory budget) | always | never
    memory_budget: int = MAX_AUTO_BUDGET  # activation bytes a micro-batch may keep without recomputation
    shared_prefix: bool = _NODE.shared_prefix  # False: every completion re-runs its prompt (the reference path)
    external_negatives: str = _NODE.external_negatives  # engine.learning.offpolicy: onpolicy | drop | topr
    importance_cap: float = _NODE.importance_cap  # truncated importance sampling cap C (0 = off)

    @classmethod
    def from_settings(cls, cfg: NodeConfig, memory_budget: int) -> TrainConfig:
        """The training part of a node's (resolved) settings: every field of the same name."""
        cfg.check_resolved()
        same = {f.name: getattr(cfg, f.name) for f in fields(cls) if hasattr(cfg, f.name)}
        return cls(**same | {"memory_budget": memory_budget})

    @property
    def weighted(self) -> bool:
        """Whether tokens get engine.learning.offpolicy weights (else every weight is 1: skip the work)."""
        return self.external_negatives != "onpolicy" or self.importance_cap > 0


@dataclass(frozen=True)
class TrainStats:
    loss: float
    tokens: int  # completion tokens trained on
    sequences: int
    clip_low_frac: float
    clip_high_frac: float
    grad_norm: float
    seconds: float
    prompt_tokens: int = 0  # prompt tokens run through the model (a group's once, a micro-batch's common beginning once)
    prompt_tokens_per_group: int = 0  # the same counted once per group part (issue 11's step), for comparison
    micro_batches: int = 0
    checkpointed: int = 0  # micro-batches that recomputed activations in backward
    activation_bytes: int = 0  # the largest micro-batch's, as measured (checkpointed: what it kept)
    logprob_mean: float = 0.0  # mean completion-token log-prob in the (last) update's forward
    tokens_computed: int = 0  # completion tokens run through the model: ``tokens`` less those without gradient
    skipped: int = 0  # updates not applied: their gradient was not finite


class _TargetLogprobs(torch.autograd.Function):
    """log p(target) from hidden states, its gradient formed in forward: two head matmuls, not three.

    d log p(t) / d h = (onehot(t) - softmax(h W^T)) W, an (n, H) tensor: computing it while the chunk's
    logits are at hand and keeping only it (not the logits) costs one extra matmul in forward and
    nothing in backward, where recomputing the logits (checkpointing) cost two matmuls there.
    Hand-written: autograd cannot see that the full-vocabulary softmax is only needed as this product.
    """

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,  # type: ignore[override]
                chunk: int) -> torch.Tensor:
        need_grad = ctx.needs_input_grad[0]
        out = hidden.new_empty(hidden.shape[0], dtype=torch.float32)
        dh = hidden.new_empty(hidden.shape, dtype=torch.float32) if need_grad else None
        for s in range(0, hidden.shape[0], chunk):
            h, t = hidden[s:s + chunk].float(), targets[s:s + chunk]
            logits = h @ weight.T  # (c, V), fp32 whatever the model's dtype
            lse = torch.logsumexp(logits, dim=-1)
            out[s:s + chunk] = logits.gather(-1, t[:, None]).squeeze(-1) - lse
            if dh is not None:
                # (onehot(t) - softmax) W, in place over the logits (not needed again); the one-hot is
                # subtracted before the matmul, not after, so a confident token loses no precision.
                d = logits.sub_(lse[:, None]).exp_().neg_()
                d[torch.arange(len(t), device=d.device), t] += 1
                dh[s:s + chunk] = d @ weight
        ctx.save_for_backward(dh)
        ctx.hidden_dtype = hidden.dtype
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None]:  # type: ignore[override]
        (dh,) = ctx.saved_tensors
        return (grad[:, None] * dh).to(ctx.hidden_dtype), None, None, None


def target_logprobs(weight: torch.Tensor | torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
                    chunk: int = LOGIT_CHUNK) -> torch.Tensor:
    """log p(targets) (n,) from hidden states (n, H) and the frozen output head's weight (V, H), never
    holding more than ``chunk`` rows of logits; differentiable in ``hidden`` only."""
    if isinstance(weight, torch.nn.Module):
        weight = weight.weight
    weight = weight.detach().float()
    if hidden.shape[0] == 0:
        return hidden.new_zeros(0, dtype=torch.float32)
    return _TargetLogprobs.apply(hidden, weight, targets.to(hidden.device), chunk)


def make_optimizer(cfg: TrainConfig, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    return torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)


def _checkpointable(layer: torch.nn.Module) -> None:
    """Let ``layer.sapo_checkpoint`` switch recomputation of this layer on and off per call.

    Not transformers' own switch: that one drops the KV cache the shared prefix needs.
    """
    if hasattr(layer, "sapo_checkpoint"):
        return
    layer.sapo_checkpoint = False
    forward = layer.forward

    def maybe_checkpointed(*args: object, **kwargs: object) -> object:
        if layer.sapo_checkpoint and torch.is_grad_enabled():
            return checkpoint(forward, *args, use_reentrant=False, **kwargs)
        return forward(*args, **kwargs)

    layer.forward = maybe_checkpointed


def _rng_state(module: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    dev = next(module.parameters()).device
    return torch.get_rng_state(), torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None


@contextlib.contextmanager
def _rng_restored(module: torch.nn.Module, state: tuple[torch.Tensor, torch.Tensor | None]) -> Iterator[None]:
    """Run with the random state ``state``, leaving the caller's as it was."""
    dev = next(module.parameters()).device
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.set_rng_state(state[0])
        if state[1] is not None:
            torch.cuda.set_rng_state(state[1], dev)
        yield


def micro_batches(units: Sequence[Unit], size: int,
                  fits: Callable[[list[Unit]], bool] | None = None) -> list[list[Unit]]:
    """Consecutive units, at most ``size`` completions per batch unless one group alone is larger;
    with ``fits``, a unit also starts a new batch when the current one would no longer fit."""
    out: list[list[Unit]] = []
    count = 0
    for u in units:
        n = len(u.completions) if isinstance(u, TrainGroup) else 1
        if not out or count + n > size or (fits is not None and not fits(out[-1] + [u])):
            out.append([])
            count = 0
        out[-1].append(u)
        count += n
    return out


def _slice(g: TrainGroup, a: int, b: int) -> TrainGroup:
    """Completions a..b of a group, with its prompt."""
    return TrainGroup(g.prompt_ids, g.completions[a:b], g.advantages[a:b],
                      g.behavior[a:b] if g.behavior is not None else None, g.external)


def _keep(groups: Sequence[TrainGroup], keep: Callable[[list[int], float, bool], bool]) -> list[TrainGroup]:
    """The groups with only the completions ``keep(completion, advantage, external)`` accepts, behaviour
    log-probs alongside; groups left without a completion are left out."""
    out = []
    for g in groups:
        behavior = g.behavior or [None] * len(g.completions)
        kept = [(c, a, b) for c, a, b in zip(g.completions, g.advantages, behavior) if keep(c, a, g.external)]
        if kept:
            out.append(TrainGroup(g.prompt_ids, [c for c, _, _ in kept], [a for _, a, _ in kept],
                                  [b for _, _, b in kept] if g.behavior is not None else None, g.external))
    return out


def _clean(groups: Sequence[TrainGroup]) -> list[TrainGroup]:
    """Groups without empty completions (they carry no tokens), without empty groups, in prompt order:
    groups whose prompts begin alike (one task's preamble) land in the same micro-batch, which runs
    that beginning once (engine.learning.packing)."""
    out = _keep([g for g in groups if g.prompt_ids], lambda c, a, e: bool(c))
    return sorted(out, key=lambda g: (g.prompt_ids, max(len(c) for c in g.completions)))


def _with_gradient(groups: Sequence[TrainGroup], negatives: str) -> list[TrainGroup]:
    """The groups with only the completions that carry gradient (``offpolicy.carries_gradient``)."""
    return _keep(groups, lambda c, a, e: carries_gradient(a, e, negatives))


class Trainer:
    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, pad_id: int = 0) -> None:
        self.model = model  # a peft model; only LoRA parameters require grad
        self.cfg = cfg
        self.pad_id = pad_id
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(cfg, self.params)
        hf = model.get_base_model()
        self.decoder = hf.model
        head = hf.get_output_embeddings().weight
        # Logits and log-softmax in fp32 even for a head stored in lower precision (a one-off fp32 copy).
        self.head_weight = head if head.dtype == torch.float32 else head.detach().float()
        self.dtype = self.decoder.get_input_embeddings().weight.dtype
        self.device = head.device
        self.plan = MemoryPlan(Dims.of(hf.config), torch.finfo(self.dtype).bits // 8, cfg.memory_budget,
                               cfg.checkpointing)
        self._frozen = [*self.model.parameters(), self.head_weight]  # never counted as activations
        self.layers = list(self.decoder.layers)
        for layer in self.layers:
            _checkpointable(layer)
        self._prefixes = PrefixPlan(((),), {})  # the current update's shared prompt beginnings
        self._prefix_rng = _rng_state(self.decoder)  # the random state the beginnings last ran with
        model.train()

    def set_learning_rate(self, lr: float) -> None:
        """The step size of the next updates (the optimizer's moments are kept)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # --- one micro-batch: packed completion-token log-probs and their advantages ---
    def _shape(self, batch: list[Unit]) -> BatchShape:
        if self.cfg.shared_prefix:  # one row: the rests' tree and the completions, after their beginnings
            groups = [u for u in batch if isinstance(u, TrainGroup)]
            n = self._prompt_tokens(groups) + sum(len(c) for g in groups for c in g.completions)
            fams = {self._prefixes.family_of.get(tuple(g.prompt_ids), 0) for g in groups}
            return BatchShape(n, n + sum(len(self._prefixes.families[f]) for f in fams))
        seqs = [u for u in batch if isinstance(u, TrainSequence)]
        T = max(len(s.prompt_ids) + len(s.completion_ids) for s in seqs)
        return BatchShape(len(seqs) * T, len(seqs) * T)

    def _forward(self, batch: list[Unit], prefixes: list[PrefixCache | None] | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probs, advantages), one per completion token, packed in completion order; ``prefixes``:
        the update's prompt beginnings (``run_prefixes``), whose keys/values the groups attend to."""
        if self.cfg.shared_prefix:
            groups = [u for u in batch if isinstance(u, TrainGroup)]
            rows = [g for g, grp in enumerate(groups) for _ in grp.completions]
            comps = [c for grp in groups for c in grp.completions]
            fams = [self._prefixes.family_of.get(tuple(g.prompt_ids), 0) for g in groups]
            cuts = [self._prefixes.prefix_len(g.prompt_ids) if prefixes is not None else 0 for g in groups]
            layout = tree_batch([g.prompt_ids for g in groups], comps, rows, cuts, fams)
            prefix = gather_prefix(prefixes, layout.beginnings) if prefixes is not None else None
            hidden, targets = hidden_for_targets(self.decoder, layout, prefix), layout.targets
            adv = [a for g in groups for a in g.advantages]
        else:
            seqs = [u for u in batch if isinstance(u, TrainSequence)]
            hidden, targets = self._sequence_hidden(seqs)
            comps, adv = [s.completion_ids for s in seqs], [s.advantage for s in seqs]
        lp = target_logprobs(self.head_weight, hidden, targets.to(self.device))
        lens = torch.tensor([len(c) for c in comps])
        return lp, torch.repeat_interleave(torch.tensor(adv, dtype=torch.float32), lens).to(self.device)

    def _prompt_tokens(self, batch: list[Unit]) -> int:
        """Prompt tokens a micro-batch computes: its prompts' rests after their update-wide beginnings, as a
        tree (each distinct rest once per beginning); every prompt whole on the reference path."""
        if not self.cfg.shared_prefix:
            return sum(len(u.prompt_ids) for u in batch)
        return tree_tokens([u.prompt_ids for u in batch], [self._prefixes.prefix_len(u.prompt_ids) for u in batch],
                           [self._prefixes.family_of.get(tuple(u.prompt_ids), 0) for u in batch])

    def _prefix_bytes(self) -> int:
        """Memory the beginnings hold while the micro-batches run: their keys/values only, since their
        passes run without autograd there and again with it at the update's end (``_backward_prefixes``)."""
        cfg = self.decoder.config
        layers = cfg.num_hidden_layers
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        cells = sum(len(f) for f in self._prefixes.families)  # each family's keys include the root's
        # Keys and values, plus their gradients' buffers of the same size.
        return 4 * layers * kv_heads * head_dim * cells * self.decoder.get_input_embeddings().weight.element_size()

    def _run_prefixes(self, grad: bool) -> list[PrefixCache | None]:
        """The update's beginnings' keys/values, run once without autograd. With ``grad``, as leaves whose
        gradients sum over the micro-batches; ``_backward_prefixes`` takes them back through the passes.
        Why not keep the passes' autograd graph: its activations would live through every micro-batch,
        and on long preambles that cost more memory than the micro-batches themselves."""
        self._set_checkpointing(False)
        self._prefix_rng = _rng_state(self.decoder)  # so that the second pass draws any dropout mask again
        with torch.no_grad():
            caches = run_prefixes(self.decoder, self._prefixes)
        if not grad:
            return caches
        for c in caches:
            if c is not None:
                for t in (*c.keys.values(), *c.values.values()):
                    t.requires_grad_()
        return caches

    def _backward_prefixes(self, leaves: list[PrefixCache | None]) -> None:
        """The gradient summed at the beginnings' keys/values, back through their passes, run again with
        autograd: the same computation (the random state is put back, so a LoRA dropout draws the same mask).
        Costs the beginnings' forward twice, still once per update, not once per group."""
        if not any(leaf is not None and any(t.grad is not None for t in leaf.keys.values()) for leaf in leaves):
            return
        self._set_checkpointing(False)
        with _rng_restored(self.decoder, self._prefix_rng):
            caches = run_prefixes(self.decoder, self._prefixes)
        outs, grads = [], []
        for c, leaf in zip(caches, leaves):
            if c is None or leaf is None:
                continue
            for mine, theirs in ((c.keys, leaf.keys), (c.values, leaf.values)):
                for n, t in mine.items():
                    if theirs[n].grad is not None:
                        outs.append(t)
                        grads.append(theirs[n].grad)
        if outs:
            torch.autograd.backward(outs, grads)

    def _sequence_hidden(self, batch: list[TrainSequence]) -> tuple[torch.Tensor, torch.Tensor]:
        """Each sequence whole (prompt + completion): hidden states predicting its completion tokens."""
        seqs = [s.prompt_ids + s.completion_ids for s in batch]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)  # (B, T)
        attn = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = torch.tensor(s)
            attn[i, :len(s)] = 1
        hidden = self.decoder(input_ids=ids.to(self.device),
                              attention_mask=attn.to(self.device)).last_hidden_state  # (B, T, H)
        # Position t predicts token t+1: completion tokens start at index len(prompt).
        rows, cols, targets = [], [], []
        for i, s in enumerate(batch):
            p, c = len(s.prompt_ids), len(s.completion_ids)
            rows += [i] * c
            cols += range(p - 1, p + c - 1)
            targets += s.completion_ids
        index = torch.tensor(rows, device=self.device), torch.tensor(cols, device=self.device)
        return hidden[index], torch.tensor(targets)

    def _weights(self, batch: list[Unit], lp: torch.Tensor, adv: torch.Tensor) -> torch.Tensor | None:
        """engine.learning.offpolicy's per-token weights for a micro-batch, packed like ``_forward``'s tokens."""
        if not self.cfg.weighted:
            return None
        groups = [u for u in batch if isinstance(u, TrainGroup)]
        if groups:  # shared prefix: completions in group order
            comps = [(c, (g.behavior or [None] * len(g.completions))[j], g.external)
                     for g in groups for j, c in enumerate(g.completions)]
        else:  # the reference path has lost group membership: no behavior log-probs there
            comps = [(s.completion_ids, None, s.external) for s in batch if isinstance(s, TrainSequence)]
        nan = float("nan")
        behavior = torch.tensor([x for c, b, _ in comps for x in (b if b is not None else [nan] * len(c))])
        external = torch.tensor([e for c, _, e in comps for _ in c], dtype=torch.bool)
        return token_weights(lp, behavior.to(lp.device), adv, external.to(lp.device),
                             self.cfg.external_negatives, self.cfg.importance_cap)

    def _set_checkpointing(self, on: bool) -> None:
        for layer in self.layers:
            layer.sapo_checkpoint = on

    # --- the update ---
    def _batches(self, groups: Sequence[TrainGroup]) -> list[list[Unit]]:
        if not self.cfg.shared_prefix:
            seqs = sorted((s for g in groups for s in g.sequences()),
                          key=lambda s: len(s.prompt_ids) + len(s.completion_ids))
            return micro_batches(seqs, self.cfg.micro_batch)
        if self.plan.mode != "auto":
            return micro_batches(list(groups), self.cfg.micro_batch)
        return self._fit(groups)

    def _fits(self, batch: list[Unit]) -> bool:
        return not self.plan.checkpoint(self._shape(batch))

    def _fit(self, groups: Sequence[TrainGroup]) -> list[list[Unit]]:
        """Micro-batches whose activations fit the memory budget, so that none needs recomputing.

        A group too large alone whose completions outweigh its prompt (say 4 x 192 tokens after 64)
        is split into parts with the same prompt, each running it again: exact (the loss is a sum
        over completion tokens) and cheaper than recomputing every layer in backward. Any other
        micro-batch over the budget is checkpointed.
        """
        parts: list[TrainGroup] = []
        for g in groups:
            todo = [g]
            while todo:
                part = todo.pop(0)
                # Halving re-runs the prompt once more (2P token passes); recomputing costs one more forward
                # of prompt and completions (P + S): split only a group whose completions outweigh its prompt.
                if (len(part.completions) > 1 and not self._fits([part])
                        and len(part.prompt_ids) < sum(len(c) for c in part.completions)):
                    half = len(part.completions) // 2
                    todo[:0] = [_slice(part, 0, half), _slice(part, half, len(part.completions))]
                else:
                    parts.append(part)
        return micro_batches(parts, self.cfg.micro_batch, self._fits)

    @torch.no_grad()
    def _logprobs(self, batches: list[list[Unit]]) -> list[torch.Tensor]:
        """Per micro-batch, packed completion-token log-probs under the current policy (no grad)."""
        was_training = self.model.training
        self.model.eval()
        prefixes = self._run_prefixes(grad=False) if self.cfg.shared_prefix else None
        out = [self._forward(batch, prefixes)[0] for batch in batches]
        self.model.train(was_training)
        return out

    def step(self, groups: Sequence[TrainGroup],
             on_micro_batch: Callable[[int, int], None] | None = None) -> TrainStats:
        """``iterations`` optimizer steps on these groups; returns stats of the last."""
        t0 = time.perf_counter()
        groups = _clean(groups)
        if not groups:
            return TrainStats(0.0, 0, 0, 0.0, 0.0, 0.0, 0.0)
        total_tokens = sum(len(c) for g in groups for c in g.completions)  # the normaliser: every token counts
        n_seqs = sum(len(g.completions) for g in groups)
        # What cannot move the policy is not run (if nothing can, everything runs as before: zero gradients, a step).
        groups = _with_gradient(groups, self.cfg.external_negatives) or groups
        self._prefixes = plan_prefixes([g.prompt_ids for g in groups]) if self.cfg.shared_prefix \
            else PrefixPlan(((),), {})
        # The beginnings' keys/values live through the update: micro-batches get what is left of the budget.
        self.plan.budget = max(self.cfg.memory_budget // 4, self.cfg.memory_budget - self._prefix_bytes())
        batches = self._batches(groups)
        if self.cfg.shared_prefix:  # again, over the parts: a group split in two runs its prompt once too
            self._prefixes = plan_prefixes([u.prompt_ids for batch in batches for u in batch])
        computed = sum(len(c) for g in groups for c in g.completions)
        prompt_tokens = self._prefixes.tokens + sum(self._prompt_tokens(batch) for batch in batches)  # as computed
        per_group = sum(len(u.prompt_ids) for batch in batches for u in batch)
        old = self._logprobs(batches) if self.cfg.iterations > 1 else None
        checkpointed = act_bytes = skipped = 0
        for _ in range(self.cfg.iterations):
            self.optimizer.zero_grad(set_to_none=True)
            loss_sum = low = high = lp_sum = 0.0
            checkpointed = 0
            leaves = self._run_prefixes(grad=True) if self.cfg.shared_prefix else None
            for i, batch in enumerate(batches):
                shape = self._shape(batch)
                ckpt = self.plan.checkpoint(shape)
                self._set_checkpointing(ckpt)
                meter = SavedBytes(self._frozen)
                with meter:
                    lp, adv = self._forward(batch, leaves)
                act_bytes = max(act_bytes, meter.bytes)
                if ckpt:
                    checkpointed += 1
                else:
                    self.plan.observe(shape, meter.bytes)
                lp_old = old[i] if old is not None else lp.detach()
                # Tokens are packed, so each is passed as a length-1 "sequence" with its own advantage.
                w = self._weights(batch, lp, adv)
                loss, st = clipped_token_loss(lp[:, None], lp_old[:, None], adv, torch.ones_like(lp)[:, None],
                                              self.cfg.eps_low, self.cfg.eps_high, normalizer=total_tokens,
                                              weights=w[:, None] if w is not None else None)
                loss.backward()
                loss_sum += st.loss
                lp_sum += float(lp.detach().sum())
                low += st.clip_low_frac * st.tokens
                high += st.clip_high_frac * st.tokens
                if on_micro_batch is not None:  # progress for the app: micro-batches done, of how many
                    on_micro_batch(i + 1, len(batches))
            self._set_checkpointing(False)
            if leaves is not None:
                self._backward_prefixes(leaves)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip))
            if math.isfinite(grad_norm):
                self.optimizer.step()
            else:  # one inf or NaN would poison the LoRA and Adam's moments for good: this update is left out
                self.optimizer.zero_grad(set_to_none=True)
                skipped += 1
        return TrainStats(loss_sum, total_tokens, n_seqs, low / total_tokens, high / total_tokens,
                          grad_norm, time.perf_counter() - t0, prompt_tokens=prompt_tokens,
                          prompt_tokens_per_group=per_group,
                          micro_batches=len(batches), checkpointed=checkpointed, activation_bytes=act_bytes,
                          logprob_mean=lp_sum / computed, tokens_computed=computed, skipped=skipped)
