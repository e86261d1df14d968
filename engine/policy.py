"""The trainable policy: the node's GGUF, dequantized into torch, with a peft LoRA on top.

The GGUF is the single source of truth for the weights: transformers' ``gguf_file``
loader dequantizes the same file llama.cpp samples from, so both sides share the base
weights up to llama.cpp's activation quantization. Tokens never pass through a Hugging
Face tokenizer: the trainer receives llama.cpp's ids (``engine.llm``), which keeps
training and sampling on identical token sequences.

Dequantizing takes seconds to minutes, so the result is cached in the data dir as
safetensors (written atomically, keyed by the GGUF's identity) and later starts load that.
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


def load_base(gguf_path: Path, cache_dir: Path | None = None, dtype: torch.dtype = torch.float32,
              device: torch.device | str = "cpu") -> torch.nn.Module:
    """The dequantized base model (frozen) in ``dtype`` on ``device``, from the cache when there is one.

    The cache always holds fp32 (the GGUF's dequantized values); a bf16 base is cast from it
    once here, so training never re-casts weights per call (as autocast would).
    """
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cached = cache_dir / f"{gguf_path.stem}.{file_identity(gguf_path)}" if cache_dir else None
    if cached is not None and (cached / "model.safetensors").is_file():
        model = AutoModelForCausalLM.from_pretrained(cached, dtype=dtype, attn_implementation="sdpa")
    else:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                             dtype=torch.float32, attn_implementation="sdpa")
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
        model = model.to(dtype)
    model = model.to(device)
    model.config.use_cache = False
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def lora_config(rank: int, alpha: float, dropout: float, targets: list[str]) -> LoraConfig:
    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(targets),
                      bias="none", task_type="CAUSAL_LM")


def attach_lora(base: torch.nn.Module, config: LoraConfig) -> PeftModel:
    try:
        with warnings.catch_warnings():  # peft reads a property transformers 5 deprecated; nothing to act on
            warnings.simplefilter("ignore", FutureWarning)
            return get_peft_model(base, config)
    except ValueError as exc:
        raise SapoError(f"LoRA targets {config.target_modules} do not fit this model: {exc}") from None


def lora_state(model: PeftModel) -> dict[str, torch.Tensor]:
    """The trainable LoRA tensors, by peft's parameter names."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
