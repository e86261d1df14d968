"""The trainable policy: the node's GGUF, dequantized into torch, with a peft LoRA on top.

The GGUF is the single source of truth for the weights: transformers' ``gguf_file``
loader dequantizes the same file llama.cpp samples from, so both sides share the base
weights up to llama.cpp's activation quantization. Tokens never pass through a Hugging
Face tokenizer: the trainer receives llama.cpp's ids (``engine.sampling.llm``), which keeps
training and sampling on identical token sequences.

Dequantizing takes seconds to minutes, so the result is cached in the data dir as
safetensors (written atomically, keyed by the GGUF's identity) and later starts load that.
That first load is what a new volunteer waits for (the wizard's speed test, the first start):
transformers (5.x) parses the file's metadata twice (config, then weights; mostly the 49k-token
vocabulary) and rebuilds gguf-py's tensor-name table once per module (397 times for SmolLM2).
Both are pure, so ``_gguf_parsed_once`` makes each happen once for the load: 2-3x faster,
the same weights bit for bit (tests/test_policy_load.py; docs/BENCHMARKS.md).

bf16: only the frozen weights of the decoder layers' linear maps are stored in bf16 (once,
at load), and only their matmuls run in bf16; activations, the residual stream, norms,
embeddings, the output head, LoRA and optimizer stay fp32. Casting the whole model instead
doubled the log-prob error against fp32 (0.029 vs 0.017 nats/token on the bundled model) for
no speed gain: the matmuls are ~65 % of a training step and all of bf16's gain.

Gemma 3 (checked against the real 270M file, tests/test_gemma.py): transformers dequantizes
its mixed Q4_K/Q5_0/Q6_K/Q8_0 tensors with gguf-py's own kernels, subtracts the 1 that
llama.cpp's converter adds to Gemma's norm weights, ties the output head to the embedding
(the file stores it once), keeps the sqrt(hidden) embedding scale in the model, and builds
the 5-sliding : 1-global attention layout from the file's sliding window. Final-logit
soft-capping (Gemma 2) would be skipped by the trainer's chunked log-probs, so a model
that uses it is refused.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import Linear as PeftLoraLinear

from engine.errors import SapoError, first_line
from engine.models.working_copy import file_identity


class Bf16Linear(torch.nn.Linear):
    """A frozen linear map with a bf16 weight: bf16 matmul, input and output in the caller's dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.to(self.weight.dtype)
        return F.linear(x.to(self.weight.dtype), self.weight, bias).to(x.dtype)


def bf16_linears(model: torch.nn.Module) -> int:
    """Store the decoder layers' linear weights in bf16, once; returns how many. Before attaching LoRA."""
    n = 0
    for module in model.get_decoder().layers.modules():
        if type(module) is torch.nn.Linear:
            module.weight.data = module.weight.data.to(torch.bfloat16)
            if module.bias is not None:
                module.bias.data = module.bias.data.to(torch.bfloat16)
            module.__class__ = Bf16Linear  # same parameters, bf16 forward
            n += 1
    return n


def _own_memory(model: torch.nn.Module) -> None:
    """Copy weights still backed by the cached safetensors' memory map into the process's own memory.

    Pages of a mapped file that were read once stay in the resident set: after the bf16 cast the
    fp32 originals of the linear weights (~0.4 GB for the bundled model) kept counting in RSS beside
    their bf16 copies until the whole map was dropped. Tied weights are one Parameter, copied once.
    """
    for p in model.parameters():  # each Parameter once, tied ones included
        p.data = p.data.clone()
    for module in model.modules():
        for name, b in module.named_buffers(recurse=False):
            setattr(module, name, b.clone())


@contextlib.contextmanager
def _no_gguf_bar() -> Iterator[None]:
    """transformers' GGUF conversion draws its own tqdm bar, which its logging switch does not reach."""
    from transformers import modeling_gguf_pytorch_utils as conversion

    real = getattr(conversion, "tqdm", None)
    if real is not None:
        conversion.tqdm = functools.partial(real, disable=True)
    try:
        yield
    finally:
        if real is not None:
            conversion.tqdm = real


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """For the block: one ``gguf.GGUFReader`` per file and one tensor-name table per (arch, layers).
    transformers imports both from ``gguf`` at each call, so replacing the module's names reaches it;
    they are put back after, and nothing else in the process loads a GGUF in torch meanwhile."""
    import gguf

    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], object] = {}

    def reader(path, mode="r"):  # type: ignore[no-untyped-def]
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(real_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_map


def _exact_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights for the cache, each once (a tied one under its first name), each tensor in bf16
    where that loses nothing (every value of a BF16 working copy's matrices) and fp32 otherwise.

    Loading casts them back to fp32 bit for bit, so the cache is exact either way; for the bundled model on
    a CPU with AVX512-BF16 it is 270 MB instead of 540 MB.
    """
    state, seen = {}, set()
    for name, t in model.state_dict().items():
        if t.data_ptr() in seen:  # tied: transformers re-ties it from the config on load
            continue
        seen.add(t.data_ptr())
        t = t.detach().contiguous()
        if t.dtype == torch.float32 and torch.equal(t.to(torch.bfloat16).float(), t):
            t = t.to(torch.bfloat16)
        state[name] = t
    return state


def load_base(gguf_path: Path, cache_dir: Path | None = None, dtype: torch.dtype = torch.float32,
              device: torch.device | str = "cpu") -> torch.nn.Module:
    """The dequantized base model (frozen) on ``device``, from the cache when there is one.

    ``dtype`` bf16: the decoder's linear weights in bf16, the rest fp32 (``bf16_linears``).
    The cache holds the GGUF's dequantized values exactly (``_exact_state``): half the disk for a BF16 file.
    """
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    # Its bars are carriage-return noise in a headless node's log and the app's Log tab; the node reports its own
    # start-up. Loading's bar follows this switch; dequantizing's is a bare tqdm (_no_gguf_bar).
    hf_logging.disable_progress_bar()
    cached = cache_dir / f"{gguf_path.stem}.{file_identity(gguf_path)}" if cache_dir else None
    if cached is not None and (cached / "model.safetensors").is_file():
        model = AutoModelForCausalLM.from_pretrained(cached, dtype=torch.float32, attn_implementation="sdpa")
    else:
        try:
            with warnings.catch_warnings(), _gguf_parsed_once(), _no_gguf_bar():
                warnings.simplefilter("ignore")
                model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                             dtype=torch.float32, attn_implementation="sdpa")
        except Exception as exc:  # noqa: BLE001 - transformers raises many types for unsupported files
            raise SapoError(f"torch could not load {gguf_path.name}: {first_line(exc, 200)}") from None
        if cached is not None:
            # save_pretrained refuses GGUF-loaded models; the plain weights and config are all we need.
            tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
            tmp.mkdir(parents=True, exist_ok=True)
            save_file(_exact_state(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
            config = model.config.to_dict()
            config.pop("quantization_config", None)
            (tmp / "config.json").write_text(json.dumps(config))
            shutil.rmtree(cached, ignore_errors=True)
            os.replace(tmp, cached)
    if getattr(model.config, "final_logit_softcapping", None):
        raise SapoError(f"{gguf_path.name} uses final-logit soft-capping, which training does not apply")
    if dtype == torch.bfloat16:
        bf16_linears(model)
    elif dtype != torch.float32:
        raise ValueError(f"training dtype must be float32 or bfloat16, not {dtype}")
    _own_memory(model)
    model = model.to(device)
    model.config.use_cache = False
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def lora_config(rank: int, alpha: float, dropout: float, targets: list[str]) -> LoraConfig:
    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(targets),
                      bias="none", task_type="CAUSAL_LM")


class FusedLoraLinear(PeftLoraLinear):
    """peft's LoRA linear map with the adapter's second product, its scaling and the sum in one ``addmm``.

    peft computes ``base(x) + B(A(x)) * s`` as three operations and three autograd nodes for every adapted
    matrix, ~210 of them in a SmolLM2 forward; on a CPU training step of short answers their per-call cost is
    a visible share (a training step ~5-9 % faster, docs/BENCHMARKS.md). The same products in the same order:
    outputs and gradients equal peft's bit for bit on CPU (tests/test_trainer.py). Anything but a plain
    adapter (dropout, a second adapter, DoRA and other variants, merged weights, a bias on B) takes peft's own
    forward.
    """

    def forward(self, x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        name = self._plain_adapter() if not (args or kwargs) else None
        if name is None:
            return super().forward(x, *args, **kwargs)
        a, b = self.lora_A[name].weight, self.lora_B[name].weight
        base = self.base_layer(x)  # as peft calls it: a flattened input rounds bf16 products otherwise
        xa = F.linear(x.reshape(-1, x.shape[-1]).to(a.dtype), a)
        out = torch.addmm(base.reshape(-1, base.shape[-1]).to(a.dtype), xa, b.t(), alpha=self.scaling[name])
        return out.reshape(base.shape).to(base.dtype)

    def _plain_adapter(self) -> str | None:
        if self.disable_adapters or self.merged or len(self.active_adapters) != 1:
            return None
        name = self.active_adapters[0]
        plain = (name in self.lora_A and name not in self.lora_variant and self.lora_B[name].bias is None
                 and isinstance(self.lora_dropout[name], torch.nn.Identity))
        return name if plain else None


def attach_lora(base: torch.nn.Module, config: LoraConfig) -> PeftModel:
    try:
        with warnings.catch_warnings():  # peft reads a property transformers 5 deprecated; nothing to act on
            warnings.simplefilter("ignore", FutureWarning)
            model = get_peft_model(base, config)
    except ValueError as exc:
        raise SapoError(f"LoRA targets {config.target_modules} do not fit this model: {exc}") from None
    set_fused_lora(model, True)
    return model


def set_fused_lora(model: torch.nn.Module, fused: bool) -> None:
    """Every LoRA linear map runs ``FusedLoraLinear``'s forward, or peft's own (benchmarks and tests compare
    the two). Only the class changes: same parameters, same state dict. Exact classes only: a subclass of
    peft's Linear has a forward of its own, which is kept."""
    source, target = (PeftLoraLinear, FusedLoraLinear) if fused else (FusedLoraLinear, PeftLoraLinear)
    for module in model.modules():
        if type(module) is source:
            module.__class__ = target


def lora_state(model: PeftModel) -> dict[str, torch.Tensor]:
    """The trainable LoRA tensors, by peft's parameter names."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
