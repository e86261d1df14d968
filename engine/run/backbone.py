"""What a node runs on: the llama.cpp model, the torch policy with its LoRA, and the scoring sandbox.

One ``Backbone`` per node for ``sapo-engine run``; one shared by every agent of
``sapo-engine experiment``, whose agents swap their own LoRA weights in and out (engine/lab).
Either way it is built here, by ``Backbone.load``, the only place these three are made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.config import NodeConfig
from engine.models.prepare import PreparedModel
from engine.paths import default_cache_dir

MAX_SEQS_PER_BATCH = 64
SANDBOX_WORKERS = 2  # one stuck on a hostile group's timeout leaves the other scoring


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

        cfg.check_resolved()
        sandbox = Sandbox(SANDBOX_WORKERS)
        device = choose_device(cfg.device)
        budget = cfg.local_groups + cfg.external_groups
        n_seq = min(MAX_SEQS_PER_BATCH, max(budget * (cfg.completions or 1), 2))
        layers = gpu_layers(cfg.gpu_layers, device)
        # Cells for a round's sequences; sequences up to the most a batch may hold, whatever the round needs:
        # a held-out evaluation (3 answers a question, many questions) then fills the same cells with more
        # questions a batch, and fewer batches waiting for their longest answer (1.25x its tokens/s going
        # from 32 to 64 sequences; docs/BENCHMARKS.md). Only the cells cost memory.
        llm = LlamaModel(model.path, n_ctx=n_seq * (cfg.max_tokens or 0) + 8192, n_seq_max=MAX_SEQS_PER_BATCH,
                         threads=threads, n_gpu_layers=layers)
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
