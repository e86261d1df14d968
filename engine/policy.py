"""The trainable policy: the node's GGUF, dequantized into torch, with a peft LoRA on top.

The GGUF is the single source of truth for the weights: transformers' ``gguf_file``
loader dequantizes the same file llama.cpp samples from, so both sides share the base
weights up to llama.cpp's activation quantization. Tokens never pass through a Hugging
Face tokenizer: the trainer receives llama.cpp's ids (``engine.llm``), which keeps
training and sampling on identical token sequences.

Dequantizing takes seconds to minutes, so the result is cached in the data dir as
safetensors (written atomically, keyed by the GGUF's identity) and later starts load that.

Gemma 3 (checked against the real 270M file, tests/test_gemma.py): transformers dequantizes
its mixed Q4_K/Q5_0/Q6_K/Q8_0 tensors with gguf-py's own kernels, subtracts the 1 that
llama.cpp's converter adds to Gemma's norm weights, ties the output head to the embedding
(the file stores it once), keeps the sqrt(hidden) embedding scale in the model, and builds
the 5-sliding : 1-global attention layout from the file's sliding window. Final-logit
soft-capping (Gemma 2) would be skipped by the trainer's chunked log-probs, so a model
that uses it is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model

from engine.errors import SapoError, first_line
from engine.weights import file_identity


def load_base(gguf_path: Path, cache_dir: Path | None = None, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The dequantized base model (frozen), from the cache when there is one."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cached = cache_dir / f"{gguf_path.stem}.{file_identity(gguf_path)}" if cache_dir else None
    if cached is not None and (cached / "model.safetensors").is_file():
        model = AutoModelForCausalLM.from_pretrained(cached, dtype=dtype)
    else:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=dtype)
        except Exception as exc:  # noqa: BLE001 - transformers raises many types for unsupported files
            raise SapoError(f"torch could not load {gguf_path.name}: {first_line(exc, 200)}") from None
        if cached is not None:
            # save_pretrained refuses GGUF-loaded models; the plain weights and config are all we need.
            tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
            tmp.mkdir(parents=True, exist_ok=True)
            save_model(model, str(tmp / "model.safetensors"))
            config = model.config.to_dict()
            config.pop("quantization_config", None)
            (tmp / "config.json").write_text(json.dumps(config))
            shutil.rmtree(cached, ignore_errors=True)
            os.replace(tmp, cached)
    if getattr(model.config, "final_logit_softcapping", None):
        raise SapoError(f"{gguf_path.name} uses final-logit soft-capping, which training does not apply")
    model.config.use_cache = False
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def lora_config(rank: int, alpha: float, dropout: float, targets: list[str]) -> LoraConfig:
    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(targets),
                      bias="none", task_type="CAUSAL_LM")


def attach_lora(base: torch.nn.Module, config: LoraConfig) -> PeftModel:
    try:
        return get_peft_model(base, config)
    except ValueError as exc:
        raise SapoError(f"LoRA targets {config.target_modules} do not fit this model: {exc}") from None


def lora_state(model: PeftModel) -> dict[str, torch.Tensor]:
    """The trainable LoRA tensors, by peft's parameter names."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
