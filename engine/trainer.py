"""One GRPO update of the LoRA policy per round.

Memory is the point of this module. A naive step on 32 x 256 tokens materialises
full-vocabulary logits and log-softmax for every position (49,152 wide for SmolLM2) and
peaked at 22.8 GB. Here:
- the decoder runs on a micro-batch, with gradient checkpointing on its layers;
- target-token log-probs are taken over completion positions only, a chunk of positions
  at a time, each chunk checkpointed so its logits are recomputed in backward, not kept;
- gradients accumulate over micro-batches; the loss is normalised by the update's total
  completion tokens so accumulation equals one big batch.
Old log-probs: with one iteration the ratio is exactly 1, so they are the detached new
log-probs of the same pass (no extra forward); with more, they are computed once, before
the first update, with the current policy.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
from torch.utils.checkpoint import checkpoint

from engine.groups import TrainSequence
from engine.grpo import clipped_token_loss

# peft still asks for transformers' old checkpointing property names; nothing for a user to act on.
warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)

LOGIT_CHUNK = 256  # positions per lm_head chunk: 256 x 49,152 x 4 B = 50 MB at most


@dataclass(frozen=True)
class TrainConfig:
    learning_rate: float = 3e-4
    optimizer: str = "adamw"
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    micro_batch: int = 8
    iterations: int = 1
    eps_low: float = 0.2
    eps_high: float = 0.28
    gradient_checkpointing: bool = True


@dataclass(frozen=True)
class TrainStats:
    loss: float
    tokens: int
    sequences: int
    clip_low_frac: float
    clip_high_frac: float
    grad_norm: float
    seconds: float


def _chunk_logprobs(lm_head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = lm_head(hidden).float()  # (n, V)
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)  # (n,)


def target_logprobs(lm_head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
                    chunk: int = LOGIT_CHUNK) -> torch.Tensor:
    """log p(targets) from hidden states (n, H), never holding more than ``chunk`` rows of logits."""
    parts = []
    for s in range(0, hidden.shape[0], chunk):
        h, t = hidden[s:s + chunk], targets[s:s + chunk]
        if torch.is_grad_enabled():
            parts.append(checkpoint(_chunk_logprobs, lm_head, h, t, use_reentrant=False))
        else:
            parts.append(_chunk_logprobs(lm_head, h, t))
    return torch.cat(parts) if parts else hidden.new_zeros(0)


def make_optimizer(cfg: TrainConfig, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    return torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)


class Trainer:
    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, pad_id: int = 0) -> None:
        self.model = model  # a peft model; only LoRA parameters require grad
        self.cfg = cfg
        self.pad_id = pad_id
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(cfg, self.params)
        hf = model.get_base_model()
        self.decoder = hf.model
        self.lm_head = hf.get_output_embeddings()
        if cfg.gradient_checkpointing:
            if hasattr(hf, "activation_checkpointing_enable"):  # transformers >= 5 renamed it
                hf.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()

    def _forward(self, batch: list[TrainSequence]) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs of each sequence's completion tokens, packed: (sum of completion lengths,), and lengths."""
        seqs = [s.prompt_ids + s.completion_ids for s in batch]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)  # (B, T)
        attn = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = torch.tensor(s)
            attn[i, :len(s)] = 1
        hidden = self.decoder(input_ids=ids, attention_mask=attn).last_hidden_state  # (B, T, H)
        # Position t predicts token t+1: completion tokens start at index len(prompt).
        rows, cols, targets = [], [], []
        for i, s in enumerate(batch):
            p, c = len(s.prompt_ids), len(s.completion_ids)
            rows += [i] * c
            cols += range(p - 1, p + c - 1)
            targets += s.completion_ids
        h = hidden[torch.tensor(rows), torch.tensor(cols)]  # (N, H)
        lp = target_logprobs(self.lm_head, h, torch.tensor(targets))
        return lp, torch.tensor([len(s.completion_ids) for s in batch])

    @torch.no_grad()
    def logprobs(self, samples: list[TrainSequence]) -> list[torch.Tensor]:
        """Per-sample completion log-probs under the current policy, no grad."""
        was_training = self.model.training
        self.model.eval()
        out: list[torch.Tensor] = []
        for batch in self._micro_batches(samples):
            lp, lens = self._forward(batch)
            out += list(torch.split(lp, lens.tolist()))
        self.model.train(was_training)
        return out

    def _micro_batches(self, samples: list[TrainSequence]) -> list[list[TrainSequence]]:
        mb = self.cfg.micro_batch
        return [samples[i:i + mb] for i in range(0, len(samples), mb)]

    def step(self, samples: list[TrainSequence], progress: Callable[[int, int], None] | None = None) -> TrainStats:
        """``iterations`` optimizer steps on these samples; returns stats of the last.

        ``progress(done, total)`` is called after each micro-batch (of all iterations).
        """
        t0 = time.perf_counter()
        samples = sorted((s for s in samples if s.completion_ids), key=lambda s: len(s.prompt_ids) + len(s.completion_ids))
        if not samples:
            return TrainStats(0.0, 0, 0, 0.0, 0.0, 0.0, 0.0)
        total_tokens = sum(len(s.completion_ids) for s in samples)
        old = self.logprobs(samples) if self.cfg.iterations > 1 else None
        n_batches = len(self._micro_batches(samples)) * self.cfg.iterations
        done = 0
        for _ in range(self.cfg.iterations):
            self.optimizer.zero_grad(set_to_none=True)
            loss_sum = low = high = 0.0
            offset = 0
            for batch in self._micro_batches(samples):
                lp, lens = self._forward(batch)
                if old is not None:
                    lp_old = torch.cat(old[offset:offset + len(batch)])
                else:
                    lp_old = lp.detach()
                offset += len(batch)
                adv = torch.repeat_interleave(torch.tensor([s.advantage for s in batch]), lens)  # (N,)
                # Tokens are packed, so each is passed as a length-1 "sequence" with its own advantage.
                loss, st = clipped_token_loss(lp[:, None], lp_old[:, None], adv, torch.ones_like(lp)[:, None],
                                              self.cfg.eps_low, self.cfg.eps_high, normalizer=total_tokens)
                loss.backward()
                done += 1
                if progress is not None:
                    progress(done, n_batches)
                loss_sum += st.loss
                low += st.clip_low_frac * st.tokens
                high += st.clip_high_frac * st.tokens
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip))
            self.optimizer.step()
        return TrainStats(loss_sum, total_tokens, len(samples), low / total_tokens, high / total_tokens,
                          grad_norm, time.perf_counter() - t0)
