"""How much activation memory a training micro-batch keeps for backward: estimated, then measured.

Recomputing activations in backward (checkpointing) costs a second forward, ~30 % of a step.
It is only worth paying when the activations would not fit. So each micro-batch is planned:
its activation bytes are estimated from the model's shape and the batch's padded sizes,
scaled by what earlier micro-batches really kept (measured with autograd's saved-tensor
hooks, which see exactly the tensors backward holds), and compared with a budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Dims:
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, config: object) -> "Dims":
        hidden = int(getattr(config, "hidden_size"))
        heads = int(getattr(config, "num_attention_heads"))
        return cls(layers=int(getattr(config, "num_hidden_layers")), hidden=hidden,
                   ffn=int(getattr(config, "intermediate_size", 4 * hidden)), heads=heads,
                   kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
                   head_dim=int(getattr(config, "head_dim", None) or hidden // heads))


@dataclass(frozen=True)
class BatchShape:
    """Padded sizes of one micro-batch: every query row, and every key cell attention reads."""

    query_tokens: int  # rows through the layers: G x (P + S) (shared prefix, S packed completions) or B x T
    attention_cells: int  # sum over query sequences of their key length (G x P + G x (P + S), or B x T)


def estimate_bytes(dims: Dims, shape: BatchShape, dtype_bytes: int) -> int:
    """Bytes autograd keeps for one un-checkpointed micro-batch, before calibration.

    Per layer and query token, a LoRA-on-every-linear decoder layer saves about 10 hidden-wide
    tensors (norm inputs and outputs, q, attention output, LoRA inputs, residuals) and 4
    FFN-wide ones (gate, up, activation, product). Per key cell, attention keeps keys and
    values, once at kv-head width and once expanded to every head.
    """
    per_token = 10 * dims.hidden + 4 * dims.ffn
    per_cell = 2 * dims.head_dim * (dims.kv_heads + dims.heads)
    return dims.layers * dtype_bytes * (shape.query_tokens * per_token + shape.attention_cells * per_cell)


class SavedBytes:
    """Counts the distinct storages autograd saves for backward inside the block (parameters excluded)."""

    def __init__(self, params: list[torch.Tensor] | None = None) -> None:
        self._skip = {p.untyped_storage().data_ptr() for p in (params or [])}
        self._seen: set[int] = set()
        self.bytes = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in self._seen and key not in self._skip:
            self._seen.add(key)
            self.bytes += storage.nbytes()
        return t

    def __enter__(self) -> "SavedBytes":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)


class MemoryPlan:
    """Decides per micro-batch whether to checkpoint; learns the estimate's error from measurements."""

    def __init__(self, dims: Dims, dtype_bytes: int, budget_bytes: int, mode: str = "auto") -> None:
        if mode not in ("auto", "always", "never"):
            raise ValueError(f"checkpointing must be auto, always or never, got {mode!r}")
        self.dims = dims
        self.dtype_bytes = dtype_bytes
        self.budget = budget_bytes
        self.mode = mode
        self.scale = 1.0  # measured / estimated, the largest seen (a margin, not an average)
        self.measured = False

    def estimate(self, shape: BatchShape) -> int:
        return int(estimate_bytes(self.dims, shape, self.dtype_bytes) * self.scale)

    def checkpoint(self, shape: BatchShape) -> bool:
        if self.mode != "auto":
            return self.mode == "always"
        return self.estimate(shape) > self.budget

    def observe(self, shape: BatchShape, saved: int) -> None:
        """A measurement of an un-checkpointed micro-batch of this shape."""
        raw = estimate_bytes(self.dims, shape, self.dtype_bytes)
        if raw > 0:
            ratio = saved / raw
            self.scale = ratio if not self.measured else max(self.scale, ratio)
            self.measured = True
