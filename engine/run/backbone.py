"""What a node runs on: the llama.cpp model, the torch policy with its LoRA, and the scoring sandbox.

One ``Backbone`` per node for ``sapo-engine run``; one shared by every agent of
``sapo-engine experiment``, whose agents swap their own LoRA weights in and out (engine/lab).
Either way it is built here, by ``Backbone.load``, the only place these three are made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.config import NodeConfig
from engine.errors import SapoError
from engine.models.modelfile import GGUFInfo, inspect_gguf
from engine.models.prepare import PreparedModel
from engine.paths import default_cache_dir

MAX_SEQS_PER_BATCH = 64
SANDBOX_WORKERS = 2  # one stuck on a hostile group's timeout leaves the other scoring
CONTEXT_SHARE = 0.5  # of the memory free at start the sampling context may take: loading and training need the rest


def context_cells(cfg: NodeConfig) -> int:
    """llama.cpp cells for a round's sequences (up to the most a batch may hold), and room for the prompts."""
    n_seq = min(MAX_SEQS_PER_BATCH, max((cfg.local_groups + cfg.external_groups) * (cfg.completions or 1), 2))
    return n_seq * (cfg.max_tokens or 0) + 8192


def context_bytes(info: GGUFInfo, cells: int) -> int:
    """The KV cache of ``cells`` cells: a key and a value per layer and KV head, f16 (llama.cpp's default)."""
    return cells * info.n_layers * 2 * info.n_head_kv * info.head_dim * 2


def check_context_fits(need: int, free: int, cfg: NodeConfig) -> None:
    """One line before any work where the sampling context alone would take most of the memory: at 64 answers
    of 8192 tokens (both within their bounds) the bundled model's context is 12 GiB, and the node swapped for
    minutes before its first round."""
    if need > free * CONTEXT_SHARE:
        raise SapoError(f"{cfg.completions} answers of up to {cfg.max_tokens} tokens a question need "
                        f"{need / 2**30:.1f} GiB for sampling alone, and {free / 2**30:.1f} GiB of memory is free: "
                        f"lower max_tokens or completions")


@dataclass
class Backbone:
    llm: Any  # engine.sampling.llm.LlamaModel: one context, its LoRA slot swapped per node
    policy: Any  # peft PeftModel with one LoRA
    sandbox: Any  # engine.sandbox.workers.Sandbox
    device: Any  # torch.device the policy trains on
    train_dtype: Any  # torch dtype of its frozen weights
    placement: Any = None  # engine.models.accel.Placement: where it trains and samples, the fix for an idle GPU

    @classmethod
    def load(cls, model: PreparedModel, cfg: NodeConfig, threads: int) -> Backbone:
        """Starts the scoring workers first (they load reasoning-gym while the models load), then llama.cpp
        sized for a round's I + J groups of L completions, then the torch policy with a fresh LoRA."""
        from engine.learning.policy import attach_lora, load_base, lora_config
        from engine.models.accel import choose_device, choose_dtype, gpu_layers, placement_of
        from engine.sampling.llm import LlamaModel
        from engine.sandbox.workers import Sandbox

        import psutil

        cfg.check_resolved()
        device = choose_device(cfg.device)
        layers = gpu_layers(cfg.gpu_layers, device)
        # Cells for a round's sequences; sequences up to the most a batch may hold, whatever the round needs:
        # a held-out evaluation (3 answers a question, many questions) then fills the same cells with more
        # questions a batch, and fewer batches waiting for their longest answer (1.25x its tokens/s going
        # from 32 to 64 sequences; docs/BENCHMARKS.md). Only the cells cost memory.
        cells = context_cells(cfg)
        if layers == 0:  # the context in RAM (offloaded layers keep theirs in GPU memory)
            check_context_fits(context_bytes(inspect_gguf(model.path), cells), psutil.virtual_memory().available, cfg)
        sandbox = Sandbox(SANDBOX_WORKERS)
        llm = LlamaModel(model.path, n_ctx=cells, n_seq_max=MAX_SEQS_PER_BATCH, threads=threads, n_gpu_layers=layers)
        dtype = choose_dtype(cfg.train_dtype, device)
        base = load_base(model.path, default_cache_dir() / "torch", dtype=dtype, device=device)
        policy = attach_lora(base, lora_config(cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_targets))
        return cls(llm, policy, sandbox, device, dtype, placement_of(device, layers))

    def reset_lora(self, seed: int) -> None:
        """A fresh LoRA from ``seed``, as peft makes one (A random, B zero)."""
        import torch
        from peft.tuners.lora import LoraLayer

        torch.manual_seed(seed)
        for module in self.policy.modules():
            if isinstance(module, LoraLayer):
                module.reset_lora_parameters("default", True)

    def close(self) -> None:
        self.sandbox.close()
        self.llm.close()
